#include "weft/data/packing.hpp"

#include <algorithm>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::data {

DocumentRows::DocumentRows(std::vector<int64_t> starts, int64_t seq_len)
    : starts_(std::move(starts)), seq_len_(seq_len) {
    WEFT_CHECK(!starts_.empty() && starts_.front() == 0 && seq_len >= 1,
               "internal: {} document starts for windows of {}", starts_.size(), seq_len);
}

void DocumentRows::rows(std::span<const int64_t> first, std::vector<int64_t>& positions,
                        std::vector<int64_t>& cu_seqlens) const {
    const int64_t T = seq_len_;
    positions.resize(first.size() * size_t(T));
    cu_seqlens.clear();
    for (size_t r = 0; r < first.size(); ++r) {
        const int64_t a = first[r], row = int64_t(r) * T;
        cu_seqlens.push_back(row);
        // The documents starting inside the window after its first token.
        auto it = std::upper_bound(starts_.begin(), starts_.end(), a);
        int64_t doc = a;  // where the current document (or its piece) starts in this window
        for (int64_t t = 0; t < T; ++t) {
            if (it != starts_.end() && *it == a + t) {
                doc = a + t;
                cu_seqlens.push_back(row + t);
                ++it;
            }
            positions[size_t(row + t)] = a + t - doc;
        }
    }
    cu_seqlens.push_back(int64_t(first.size()) * T);
}

}  // namespace weft::data
