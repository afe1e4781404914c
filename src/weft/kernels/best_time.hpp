#pragma once
// Timing for the machine measurements (`weft profile`, `weft bench rows`).
#include <algorithm>
#include <chrono>

namespace weft::kernels {

// Best time of `f` in seconds over repetitions lasting about `seconds` (at least 3 after one
// warm-up): the machine is shared, and the best run is the one least disturbed. `before()` runs
// untimed ahead of each repetition: a measure of something else taken in the same seconds (the
// memory bandwidth that bounds `f`), whose time counts towards `seconds`.
template <typename F, typename B>
double best_time(double seconds, F&& f, B&& before) {
    using Clock = std::chrono::steady_clock;
    f();
    double best = 1e300, spent = 0;
    for (int i = 0; i < 3 || spent < seconds; ++i) {
        const auto t0 = Clock::now();
        before();
        const auto t1 = Clock::now();
        f();
        const auto t2 = Clock::now();
        const double t = std::chrono::duration<double>(t2 - t1).count();
        best = std::min(best, t), spent += std::chrono::duration<double>(t2 - t0).count();
    }
    return best;
}

template <typename F>
double best_time(double seconds, F&& f) {
    return best_time(seconds, f, [] {});
}

}  // namespace weft::kernels
