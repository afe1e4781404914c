#pragma once
// The global order of training samples, as a pure function of (seed, step, row).
//
// The token file is cut into W = (size - 1) / T windows of T + 1 tokens that overlap by one
// (window w is tokens [w*T, w*T + T + 1): inputs are the first T, targets the last T). Sample g =
// step * global_batch + row of the run is window p = g % W of epoch e = g / W: window p itself
// when sequential, or window perm_{seed,e}(p) when shuffled. Because nothing depends on what was
// read before, a data-parallel rank reads its own rows directly, a resumed run needs only its
// step, and every layout of the same run sees the same samples in the same order.
//
// Sequential is llm.c's order within an epoch (row r of batch b starts at token (b*B + r)*T).
// At the end of the file it differs: llm.c restarts a whole batch that would not fit, weft wraps
// window by window, so no window is ever skipped.
#include <cstdint>
#include <span>

#include "weft/data/token_file.hpp"

namespace weft::data {

class DataLoader {
  public:
    // `file` must outlive the loader, which reads its tokens in place. A file too short for one
    // window of T + 1 tokens is a weft::Error naming it, its size and T.
    DataLoader(const TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential);

    // Fills inputs[T] and targets[T] for row `row` (0..global_batch-1) of the global batch of
    // optimizer step `step` (0-based).
    void sample(int64_t step, int64_t row, int64_t global_batch, int32_t* inputs,
                int32_t* targets) const;
    // Rows [row0, row0 + rows) of that batch, one after the other in inputs and targets: whole
    // sequences of T tokens when `positions` is empty, else only the listed positions of each
    // (context parallelism: a rank's share of every sequence, positions.size() tokens a row).
    void sample_rows(int64_t step, int64_t row0, int64_t rows, int64_t global_batch,
                     std::span<const int64_t> positions, int32_t* inputs, int32_t* targets) const;
    // The window that sample() reads for (step, row).
    int64_t window(int64_t step, int64_t row, int64_t global_batch) const;

    int64_t windows() const { return windows_; }
    int64_t seq_len() const { return seq_len_; }

  private:
    const TokenFile* file_;
    int64_t seq_len_;
    uint64_t seed_;
    bool sequential_;
    int64_t windows_;
};

// A pseudo-random permutation of [0, windows) keyed by (seed, epoch), evaluated at `position`,
// with no table: a 6-round Feistel network on the smallest even power of two >= windows, with
// cycle walking back into range (on average fewer than 4 rounds of the network).
int64_t shuffled_window(int64_t position, int64_t windows, uint64_t seed, int64_t epoch);

}  // namespace weft::data
