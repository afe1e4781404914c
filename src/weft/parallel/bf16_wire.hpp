#pragma once
// Collectives that carry fp32 data as bf16 on the wire (--dtype bf16 for tensor-parallel
// activations, --grad-reduce-dtype bf16 for gradients): the sender rounds to bf16 (to nearest
// even, kernels::fp32_to_bf16) into a scratch buffer, the bytes move, the receiver widens back
// to fp32. Neither MPI 3 nor Open MPI 4 has a bf16 type or a sum over one, so a sum is never
// taken in bf16: every block is summed in fp32 by the rank that owns it, in rank order, after
// an all-to-all of the bf16 blocks (a reduce-scatter by hand), and a full sum is then rounded
// once and all-gathered. Every rank of an all-reduce therefore ends with the same bits. The
// comm counters see bytes of half the fp32 size: an all-to-all and an all-gather of bf16 put
// (n-1)/n·S/2 each on the wire, half of the ring all-reduce's 2(n-1)/n·S.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/comm/mesh.hpp"

namespace weft::parallel {

// dst[i] = bf16(src[i]); dst[i] = fp32(src[i]); dst[i] += fp32(src[i]).
void round_to_bf16(uint16_t* dst, const float* src, int64_t n);
void widen_bf16(float* dst, const uint16_t* src, int64_t n);
void add_widened_bf16(float* dst, const uint16_t* src, int64_t n);
// out[i] = Σ_r fp32(blocks[r·n + i]) for r < count, in rank order, for i < n: the fp32 sum a rank
// takes of the bf16 blocks an all-to-all brought it.
void sum_widened_blocks(float* out, const uint16_t* blocks, int count, int64_t n);

// bf16 payloads as comm's byte spans.
inline std::span<const std::byte> wire_bytes(const std::vector<uint16_t>& v, int64_t begin,
                                             int64_t n) {
    return std::as_bytes(std::span<const uint16_t>(v.data() + begin, size_t(n)));
}
inline std::span<std::byte> wire_bytes(std::vector<uint16_t>& v, int64_t begin, int64_t n) {
    return std::as_writable_bytes(std::span<uint16_t>(v.data() + begin, size_t(n)));
}

// The blocking bf16 collectives of one group, with their scratch (kept between calls).
class Bf16Collectives {
  public:
    // x[n] = the sum over the group of every rank's x, the same bits on every rank.
    void all_reduce_sum(comm::Group& g, float* x, int64_t n);
    // out[size * n] = every rank's in[n], in rank order (in may be this rank's block of out).
    void all_gather(comm::Group& g, const float* in, float* out, int64_t n);
    // out[n] = the sum over the group of block rank() of every rank's in[size * n].
    void reduce_scatter_sum(comm::Group& g, const float* in, float* out, int64_t n);

  private:
    std::vector<uint16_t> send_, recv_;
    std::vector<float> sum_;
};

}  // namespace weft::parallel
