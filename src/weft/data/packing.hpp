#pragma once
// Packed documents (--pack documents, docs/long_context.md): the document boundaries and
// positions of a batch's rows. The rows are the loader's windows, unchanged (same tokens, same
// sample order as --pack none, no padding); what packing adds is where each window's documents
// start, so that attention stays inside each document and positions restart at each. A
// document that crosses the edge of a window (one longer than the window always does) is cut
// there, each piece being a document of its row.
#include <cstdint>
#include <span>
#include <vector>

namespace weft::data {

// Tokens [first, first + len) of the token file as a row's inputs, their targets one token
// further; first < 0: padding (targets -1: no loss, no gradient).
struct Segment {
    int64_t first = -1, len = 0;
};
// One row: documents (or their pieces) one after the other, their lengths summing to T.
using Row = std::vector<Segment>;

class DocumentRows {
  public:
    // `starts`: the token file's document index (doc_index.hpp), for windows of seq_len tokens.
    DocumentRows(std::vector<int64_t> starts, int64_t seq_len);

    // The rows that start at tokens first[0], first[1], ...: cu_seqlens over their flattened
    // rows (0, each document start, rows * seq_len; kernels/attention/varlen.hpp) and each row's
    // position within its document; both vectors are overwritten.
    void rows(std::span<const int64_t> first, std::vector<int64_t>& positions,
              std::vector<int64_t>& cu_seqlens) const;
    // The documents of the window that starts at token `first`, cut at its edges.
    Row window(int64_t first) const;

    int64_t documents() const { return int64_t(starts_.size()); }
    int64_t seq_len() const { return seq_len_; }

  private:
    std::vector<int64_t> starts_;
    int64_t seq_len_;
};

// The boundaries (cu_seqlens, as DocumentRows::rows) and positions of rows of T tokens each;
// both vectors are overwritten.
void row_layout(std::span<const Row> rows, int64_t T, std::vector<int64_t>& positions,
                std::vector<int64_t>& cu_seqlens);

}  // namespace weft::data
