#include "weft/serve/histogram.hpp"

#include <algorithm>

namespace weft::serve {

void Histogram::add(double x) {
    ++counts[size_t(std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin())];
    sum += x;
    ++count;
}

}  // namespace weft::serve
