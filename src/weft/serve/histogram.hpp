#pragma once
// A latency histogram as Prometheus keeps one: counts of observations at or below each bound
// (cumulated when written), their sum and their number.
#include <cstdint>
#include <vector>

namespace weft::serve {

struct Histogram {
    // Seconds: from a millisecond to a minute, about x2.5 apart (the range of a token's latency
    // on a CPU, from a tiny model's decode to a long prompt's first token behind a queue).
    std::vector<double> bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                  0.5,   1,      2.5,   5,    10,    30,   60};
    std::vector<int64_t> counts = std::vector<int64_t>(bounds.size() + 1);  // the last: +Inf
    double sum = 0;
    int64_t count = 0;

    void add(double x);
};

}  // namespace weft::serve
