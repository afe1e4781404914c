#pragma once
// Timing for the machine measurements (`weft profile`, `weft bench rows`).
#include <algorithm>
#include <chrono>

namespace weft::kernels {

// Best time of `f` in seconds over repetitions lasting about `seconds` (at least 3 after one
// warm-up): the machine is shared, and the best run is the one least disturbed.
template <typename F>
double best_time(double seconds, F&& f) {
    using Clock = std::chrono::steady_clock;
    f();
    double best = 1e300, spent = 0;
    for (int i = 0; i < 3 || spent < seconds; ++i) {
        const auto t0 = Clock::now();
        f();
        const double t = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::min(best, t), spent += t;
    }
    return best;
}

}  // namespace weft::kernels
