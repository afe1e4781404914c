#pragma once
// Pearson's chi-square test of counted draws against their law, for the tests of speculative
// sampling's exactness.
#include <cmath>
#include <map>
#include <vector>

namespace weft::test {

// The chi-square statistic of `counts` (by outcome 0 .. p.size() - 1) over n draws against p.
inline double chi_square(const std::map<int, int>& counts, const std::vector<double>& p, int n) {
    double x2 = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        const auto it = counts.find(int(i));
        const double o = it == counts.end() ? 0 : it->second, e = p[i] * n;
        x2 += (o - e) * (o - e) / e;
    }
    return x2;
}
// The 0.999 quantile of chi-square with k degrees of freedom (Wilson-Hilferty).
inline double chi_square_limit(int k) {
    const double z = 3.09, a = 2.0 / (9.0 * k);
    return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

}  // namespace weft::test
