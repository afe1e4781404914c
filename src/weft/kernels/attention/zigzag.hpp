#pragma once
// Zigzag sharding of a causal sequence over the cp ranks of context parallelism, and which blocks
// of attention it leaves: pure index math, no communication (docs/context_parallel.md).
//
// T positions are cut into 2·cp chunks of T / (2·cp); rank r keeps chunks r and 2·cp-1-r, in that
// order (its part 0 and part 1). A query of chunk i sees every key of chunk j < i, the causal half
// of chunk i, and nothing of chunk j > i; each rank so holds one early and one late chunk and
// scores the same number of (query, key) pairs as every other, where a contiguous split gives
// the last rank 2·cp - 1 times the work of the first.
//
// The attention kernel takes one contiguous query chunk and one contiguous key chunk a call
// (attention.hpp: q_pos0, k_pos0), so a rank's queries meeting another rank's keys are four
// calls, one per (query part, key part) pair; zigzag_blocks lists them.
#include <array>
#include <cstdint>
#include <vector>

namespace weft::kernels {

struct Zigzag {
    int64_t T, cp, chunk;  // chunk = T / (2·cp) positions
};

// Checks that T (positive) divides into 2·cp chunks (cp >= 1).
Zigzag zigzag(int64_t T, int64_t cp);

// The global chunk index of part 0 or 1 of a rank: rank, then 2·cp-1-rank.
int64_t zigzag_chunk(const Zigzag& z, int64_t rank, int part);

// The rank holding position pos (0 <= pos < T): the inverse of zigzag_chunk. Inline, as the
// next, so that data/balance.hpp places documents by it without linking the kernels.
inline int64_t zigzag_rank_of(const Zigzag& z, int64_t pos) {
    const int64_t chunk = pos / z.chunk;
    return chunk < z.cp ? chunk : 2 * z.cp - 1 - chunk;
}
// Whether positions first <= last all lie on one rank: inside one chunk, or across the middle
// rank's two chunks, which are adjacent. Packed documents that do need no other rank's keys.
inline bool zigzag_one_rank(const Zigzag& z, int64_t first, int64_t last) {
    return zigzag_rank_of(z, first) == zigzag_rank_of(z, last) &&
           last / z.chunk - first / z.chunk <= 1;
}

// The absolute positions of a rank's 2·chunk tokens in its local order (part 0, then part 1).
std::vector<int64_t> zigzag_positions(const Zigzag& z, int64_t rank);

// What causal masking leaves of the block where the queries of one chunk meet the keys of
// another: all of it (an earlier key chunk), its lower triangle with the diagonal (the same
// chunk), or nothing (a later key chunk).
enum class BlockMask { full, diagonal, masked };
BlockMask zigzag_mask(int64_t q_chunk, int64_t k_chunk);

// One (query part, key part) pair: the positions to give the kernel and the mask it sees.
struct ZigzagBlock {
    int q_part, k_part;
    int64_t q_pos0, k_pos0;
    BlockMask mask;
};

// The four blocks of rank q_rank's queries against rank kv_rank's keys and values, query part
// major. A ring step skips the masked ones: they would give lse = -inf for every query.
std::array<ZigzagBlock, 4> zigzag_blocks(const Zigzag& z, int64_t q_rank, int64_t kv_rank);

// The (query, key) pairs a block scores: chunk² full, chunk·(chunk+1)/2 diagonal, 0 masked.
int64_t zigzag_block_work(const Zigzag& z, BlockMask mask);

}  // namespace weft::kernels
