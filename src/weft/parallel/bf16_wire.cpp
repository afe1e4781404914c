#include "weft/parallel/bf16_wire.hpp"

#include <algorithm>

#include "weft/comm/collectives.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::parallel {

void round_to_bf16(uint16_t* dst, const float* src, int64_t n) {
    kernels::convert_fp32_to_bf16(dst, src, 1, n, n);
}

void widen_bf16(float* dst, const uint16_t* src, int64_t n) {
    kernels::convert_bf16_to_fp32(dst, src, n);
}

void add_widened_bf16(float* dst, const uint16_t* src, int64_t n) {
    kernels::add_bf16_to_fp32(dst, src, n);
}

void sum_widened_blocks(float* out, const uint16_t* blocks, int count, int64_t n) {
    widen_bf16(out, blocks, n);
    for (int r = 1; r < count; ++r) add_widened_bf16(out, blocks + r * n, n);
}

void Bf16Collectives::all_reduce_sum(comm::Group& g, float* x, int64_t n) {
    const int size = g.size(), rank = g.rank();
    if (size == 1 || n == 0) return;
    // Blocks of equal size for the all-to-all: the tail is padded with zeros.
    const int64_t block = (n + size - 1) / size, padded = block * size;
    // Kept buffers, only grown: tensor parallelism all-reduces the same sizes several times a
    // layer, and zero-filling or allocating them afresh each time cost gpt2 at tp 2 a few
    // percent of its step.
    send_.resize(size_t(padded));
    recv_.resize(size_t(padded));
    sum_.resize(size_t(block));
    std::fill(send_.begin() + n, send_.begin() + padded, uint16_t(0));
    round_to_bf16(send_.data(), x, n);
    comm::all_to_all(g, wire_bytes(std::as_const(send_), 0, padded), wire_bytes(recv_, 0, padded));
    // This rank's block, summed in fp32 in rank order, rounded once, then gathered in place.
    sum_widened_blocks(sum_.data(), recv_.data(), size, block);
    round_to_bf16(send_.data() + rank * block, sum_.data(), block);
    comm::all_gather(g, wire_bytes(std::as_const(send_), rank * block, block),
                     wire_bytes(send_, 0, padded));
    widen_bf16(x, send_.data(), n);
}

void Bf16Collectives::all_gather(comm::Group& g, const float* in, float* out, int64_t n) {
    const int size = g.size();
    if (size == 1) {
        if (in != out) std::copy_n(in, n, out);
        return;
    }
    send_.resize(size_t(n));
    recv_.resize(size_t(n) * size_t(size));
    round_to_bf16(send_.data(), in, n);
    comm::all_gather(g, wire_bytes(std::as_const(send_), 0, n), wire_bytes(recv_, 0, n * size));
    widen_bf16(out, recv_.data(), n * size);
}

void Bf16Collectives::reduce_scatter_sum(comm::Group& g, const float* in, float* out, int64_t n) {
    const int size = g.size();
    if (size == 1) {
        std::copy_n(in, n, out);
        return;
    }
    const int64_t total = n * size;
    send_.resize(size_t(total));
    recv_.resize(size_t(total));
    round_to_bf16(send_.data(), in, total);
    comm::all_to_all(g, wire_bytes(std::as_const(send_), 0, total), wire_bytes(recv_, 0, total));
    sum_widened_blocks(out, recv_.data(), size, n);
}

}  // namespace weft::parallel
