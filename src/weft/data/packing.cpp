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

Row DocumentRows::window(int64_t first) const {
    Row row;
    const int64_t end = first + seq_len_;
    // The documents starting inside the window after its first token.
    int64_t at = first;
    for (auto it = std::upper_bound(starts_.begin(), starts_.end(), first);
         it != starts_.end() && *it < end; ++it) {
        row.push_back({at, *it - at});
        at = *it;
    }
    row.push_back({at, end - at});
    return row;
}

void DocumentRows::rows(std::span<const int64_t> first, std::vector<int64_t>& positions,
                        std::vector<int64_t>& cu_seqlens) const {
    std::vector<Row> rows;
    for (int64_t a : first) rows.push_back(window(a));
    row_layout(rows, seq_len_, positions, cu_seqlens);
}

void row_layout(std::span<const Row> rows, int64_t T, std::vector<int64_t>& positions,
                std::vector<int64_t>& cu_seqlens) {
    positions.resize(rows.size() * size_t(T));
    cu_seqlens.clear();
    int64_t at = 0;
    for (const Row& row : rows) {
        const int64_t row_start = at;
        for (const Segment& s : row) {
            WEFT_CHECK(s.len >= 1 && at + s.len - row_start <= T,
                       "internal: a document of {} tokens at {} of a row of {}", s.len,
                       at - row_start, T);
            cu_seqlens.push_back(at);
            for (int64_t t = 0; t < s.len; ++t) positions[size_t(at + t)] = t;
            at += s.len;
        }
        WEFT_CHECK(at - row_start == T, "internal: a row of {} tokens, expected {}", at - row_start,
                   T);
    }
    cu_seqlens.push_back(int64_t(rows.size()) * T);
}

}  // namespace weft::data
