#include "weft/kernels/attention/zigzag.hpp"

#include "weft/core/error.hpp"

namespace weft::kernels {

namespace {

void check_rank(const Zigzag& z, int64_t rank) {
    WEFT_CHECK(rank >= 0 && rank < z.cp, "zigzag: rank {} is not in 0..{} (cp={})", rank, z.cp - 1,
               z.cp);
}

}  // namespace

Zigzag zigzag(int64_t T, int64_t cp) {
    WEFT_CHECK(cp >= 1, "zigzag: context-parallel degree cp={} must be at least 1", cp);
    WEFT_CHECK(T >= 1 && T % (2 * cp) == 0,
               "zigzag: sequence length T={} must be a positive multiple of 2*cp={} (cp={}): each "
               "rank keeps two of 2*cp equal chunks",
               T, 2 * cp, cp);
    return {T, cp, T / (2 * cp)};
}

int64_t zigzag_chunk(const Zigzag& z, int64_t rank, int part) {
    check_rank(z, rank);
    WEFT_CHECK(part == 0 || part == 1, "zigzag: part {} is neither 0 nor 1", part);
    return part == 0 ? rank : 2 * z.cp - 1 - rank;
}

std::vector<int64_t> zigzag_positions(const Zigzag& z, int64_t rank) {
    std::vector<int64_t> pos;
    pos.reserve(size_t(2 * z.chunk));
    for (int part = 0; part < 2; ++part) {
        const int64_t first = zigzag_chunk(z, rank, part) * z.chunk;
        for (int64_t t = 0; t < z.chunk; ++t) pos.push_back(first + t);
    }
    return pos;
}

BlockMask zigzag_mask(int64_t q_chunk, int64_t k_chunk) {
    if (k_chunk < q_chunk) return BlockMask::full;
    return k_chunk == q_chunk ? BlockMask::diagonal : BlockMask::masked;
}

std::array<ZigzagBlock, 4> zigzag_blocks(const Zigzag& z, int64_t q_rank, int64_t kv_rank) {
    std::array<ZigzagBlock, 4> blocks{};
    for (int qp = 0; qp < 2; ++qp)
        for (int kp = 0; kp < 2; ++kp) {
            const int64_t qc = zigzag_chunk(z, q_rank, qp), kc = zigzag_chunk(z, kv_rank, kp);
            blocks[size_t(2 * qp + kp)] = {qp, kp, qc * z.chunk, kc * z.chunk, zigzag_mask(qc, kc)};
        }
    return blocks;
}

int64_t zigzag_block_work(const Zigzag& z, BlockMask mask) {
    switch (mask) {
        case BlockMask::full:
            return z.chunk * z.chunk;
        case BlockMask::diagonal:
            return z.chunk * (z.chunk + 1) / 2;
        case BlockMask::masked:
            break;
    }
    return 0;
}

}  // namespace weft::kernels
