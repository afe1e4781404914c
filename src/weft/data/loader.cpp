#include "weft/data/loader.hpp"

#include <bit>
#include <limits>

#include "weft/core/error.hpp"

namespace weft::data {

namespace {

// splitmix64's finaliser: a cheap mix in which every input bit flips about half the output bits.
uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace

int64_t shuffled_window(int64_t position, int64_t windows, uint64_t seed, int64_t epoch) {
    WEFT_CHECK(windows >= 1 && position >= 0 && position < windows,
               "shuffled_window: position {} outside [0, {})", position, windows);
    if (windows == 1) return 0;
    const uint64_t key = mix64(seed ^ mix64(static_cast<uint64_t>(epoch)));
    // Split the index into two halves of `half` bits each: the Feistel domain is 4^half >= W.
    const int bits = std::bit_width(static_cast<uint64_t>(windows - 1));
    const int half = (bits + 1) / 2;
    const uint64_t mask = (uint64_t(1) << half) - 1;
    auto permute = [&](uint64_t x) {
        uint64_t left = x >> half, right = x & mask;
        for (uint64_t round = 0; round < 6; ++round) {
            uint64_t f = mix64(key ^ mix64((round << 56) ^ right)) & mask;
            uint64_t next = left ^ f;
            left = right;
            right = next;
        }
        return (left << half) | right;
    };
    // The network is a bijection on [0, 4^half); following its cycle from a position inside
    // [0, W) until it lands inside again is therefore a bijection on [0, W).
    uint64_t x = static_cast<uint64_t>(position);
    do {
        x = permute(x);
    } while (x >= static_cast<uint64_t>(windows));
    return static_cast<int64_t>(x);
}

DataLoader::DataLoader(const TokenFile& file, int64_t seq_len, uint64_t seed, bool sequential)
    : file_(&file), seq_len_(seq_len), seed_(seed), sequential_(sequential) {
    WEFT_CHECK(seq_len >= 1, "sequence length must be at least 1, got {} (token file '{}')",
               seq_len, file.path().string());
    // Compared as size - 1 >= T, not size >= T + 1, so that no T overflows.
    WEFT_CHECK(file.size() - 1 >= seq_len,
               "token file '{}' has {} tokens, too few for one sample of sequence length {} "
               "(a sample needs T + 1 tokens)",
               file.path().string(), file.size(), seq_len);
    windows_ = (file.size() - 1) / seq_len;
}

int64_t DataLoader::window(int64_t step, int64_t row, int64_t global_batch) const {
    WEFT_CHECK(global_batch >= 1, "global batch must be at least 1, got {}", global_batch);
    WEFT_CHECK(row >= 0 && row < global_batch, "row {} outside the global batch [0, {})", row,
               global_batch);
    WEFT_CHECK(step >= 0 && step <= (std::numeric_limits<int64_t>::max() - row) / global_batch,
               "step {} is negative or too large for a global batch of {}", step, global_batch);
    const int64_t g = step * global_batch + row;
    const int64_t epoch = g / windows_, position = g % windows_;
    return sequential_ ? position : shuffled_window(position, windows_, seed_, epoch);
}

void DataLoader::sample(int64_t step, int64_t row, int64_t global_batch, int32_t* inputs,
                        int32_t* targets) const {
    // Window w is tokens [w*T, w*T + T + 1), inside the file for every w < windows_.
    const int64_t start = window(step, row, global_batch) * seq_len_;
    file_->read(start, seq_len_, inputs);
    file_->read(start + 1, seq_len_, targets);
}

void DataLoader::sample_rows(int64_t step, int64_t row0, int64_t rows, int64_t global_batch,
                             std::span<const int64_t> positions, int32_t* inputs,
                             int32_t* targets) const {
    if (positions.empty()) {
        for (int64_t r = 0; r < rows; ++r)
            sample(step, row0 + r, global_batch, inputs + r * seq_len_, targets + r * seq_len_);
        return;
    }
    const int64_t n = int64_t(positions.size());
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t start = window(step, row0 + r, global_batch) * seq_len_;
        for (int64_t t = 0; t < n; ++t) {
            const int64_t at = positions[size_t(t)];
            WEFT_CHECK(at >= 0 && at < seq_len_, "internal: position {} outside a sequence of {}",
                       at, seq_len_);
            inputs[r * n + t] = int32_t(file_->token(start + at));
            targets[r * n + t] = int32_t(file_->token(start + at + 1));
        }
    }
}

}  // namespace weft::data
