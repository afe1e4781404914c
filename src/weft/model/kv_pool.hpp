#pragma once
// A paged KV cache (vLLM's PagedAttention): one pool of fixed-size blocks of positions, each
// holding the keys and values of every layer for `block_tokens` positions, and a block table per
// sequence naming the block of each run of its positions. A sequence takes blocks as it grows
// and gives them back when it ends, so the pool is shared by whatever runs, and no sequence
// reserves the positions it may never reach. Grouped-query aware: a position holds the kv heads'
// keys and values (Model::kv_width), not the query heads'. Under --dtype bf16 the pool holds
// them rounded to bf16 (half the bytes that attention reads per step, twice the positions a
// --kv-cache-gib holds).
//
// Prefix caching (vLLM's automatic prefix caching): a full block can be published under a hash
// of its tokens and of every token before it; a sequence whose prefix hashes alike takes the same
// block (reference counted) instead of computing it. A block whose last reference is gone stays
// published while it waits in the free list, least recently freed first to be reused, so that a
// later request with the same prefix still finds it; reusing it for other positions unpublishes
// it.
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/core/huge_pages.hpp"

namespace weft::model {

// A sequence's blocks, in position order: position p is in block table[p / block_tokens].
using BlockTable = std::vector<int32_t>;

class KvPool {
  public:
    // width = heads x head_size: the keys (and values) of one position of one layer.
    KvPool(int64_t blocks, int64_t n_layer, int64_t width, int64_t head_size,
           int64_t block_tokens = 16, bool bf16 = false);

    // Bytes of keys and values a pool of these sizes holds (the constructor's allocation).
    static int64_t bytes(int64_t blocks, int64_t n_layer, int64_t width, int64_t block_tokens,
                         bool bf16) {
        return blocks * n_layer * 2 * block_tokens * width * (bf16 ? 2 : 4);
    }

    int64_t blocks() const { return blocks_; }
    int64_t block_tokens() const { return block_tokens_; }
    int64_t width() const { return width_; }
    int64_t head_size() const { return head_size_; }
    bool bf16() const { return bf16_; }
    int64_t free_blocks() const { return int64_t(free_.size()); }
    int64_t used_blocks() const { return blocks_ - free_blocks(); }
    // Blocks that `positions` positions fill.
    int64_t blocks_for(int64_t positions) const {
        return (positions + block_tokens_ - 1) / block_tokens_;
    }

    // A free block, its count at 1; -1 when none is free.
    int32_t allocate();
    // One more reference (a free block, still published, is taken out of the free list).
    void retain(int32_t block);
    // Drops one reference; the block is free again at none.
    void release(int32_t block);
    int32_t references(int32_t block) const { return refs_[size_t(block)]; }
    // Takes blocks into `table` until it covers `positions`; false (the table unchanged) when
    // the pool has too few free.
    bool grow(BlockTable& table, int64_t positions);
    // Releases every block of `table` and empties it.
    void release_all(BlockTable& table);

    // The hash of a block of tokens following a prefix whose hash is `prefix` (0: none).
    static uint64_t block_hash(uint64_t prefix, std::span<const int32_t> tokens);
    // The block published under `hash`, or -1.
    int32_t published(uint64_t hash) const;
    // Publishes a block its sequence has filled (nothing if the hash has a block already).
    void publish(int32_t block, uint64_t hash);

    // The keys (values) of kv head `head` of `layer` at position `pos` of the sequence whose
    // blocks are `table` (head_size() of them): k and v of an fp32 pool, k16 and v16 (bf16 bits)
    // of a bf16 one.
    float* k(const BlockTable& table, int layer, int64_t pos, int64_t head) {
        return data_.data() + at(table, layer, pos, 0, head);
    }
    float* v(const BlockTable& table, int layer, int64_t pos, int64_t head) {
        return data_.data() + at(table, layer, pos, 1, head);
    }
    uint16_t* k16(const BlockTable& table, int layer, int64_t pos, int64_t head) {
        return half_.data() + at(table, layer, pos, 0, head);
    }
    uint16_t* v16(const BlockTable& table, int layer, int64_t pos, int64_t head) {
        return half_.data() + at(table, layer, pos, 1, head);
    }
    // Within a block, position p + 1's keys (values) of a head follow position p's: k(table,
    // layer, p + i, head) is k(table, layer, p, head) + i * head_size() while p + i stays in p's
    // block. The address of each position costs a division; a run of them, one.

    // Position `pos` of the sequence of `table` as a slot of the pool, block x block_tokens +
    // offset: the same keys on every rank whose pool mirrors this one's blocks (tensor-parallel
    // serving), which a position, read through a table only the leader keeps, is not.
    int64_t slot(const BlockTable& table, int64_t pos) const {
        return int64_t(table[size_t(pos / block_tokens_)]) * block_tokens_ + pos % block_tokens_;
    }
    // Copies the keys and values of every layer at slot `from` to slot `to`.
    void copy_slot(int64_t from, int64_t to);

  private:
    // A head's positions of a block are one run: a decode step's attention reads each kv head
    // apart (one task a head), and runs of 16 positions stream where a position's heads side by
    // side (a head's 128 bytes every 384 on SmolLM-135M's shape) were read at 1.55x the time,
    // its data's cache lines each a memory latency (bench/bench_attend_gathered.cpp).
    int64_t at(const BlockTable& table, int layer, int64_t pos, int kv, int64_t head) const {
        return at_slot(slot(table, pos), layer, kv, head);
    }
    int64_t at_slot(int64_t slot, int layer, int kv, int64_t head) const {
        const int64_t b = slot / block_tokens_;
        return ((((b * n_layer_ + layer) * 2 + kv) * heads_ + head) * block_tokens_ +
                slot % block_tokens_) *
               head_size_;
    }

    int64_t blocks_, n_layer_, width_, head_size_, heads_, block_tokens_;
    bool bf16_;
    // [blocks, n_layer, 2 (k, v), heads, block_tokens, head_size]: data_ in fp32, half_ in bf16
    // (the other empty), on huge pages as the weights (a block's layer is 12 KiB in bf16 on
    // SmolLM-135M's shape, each a TLB miss on 4 KiB pages).
    Buffer data_;
    std::vector<uint16_t, HugePageAllocator<uint16_t>> half_;
    std::vector<int32_t> refs_;
    std::list<int32_t> free_;                            // least recently freed first
    std::vector<std::list<int32_t>::iterator> free_at_;  // a free block's place in free_
    std::unordered_map<uint64_t, int32_t> published_;
    std::vector<uint64_t> hash_of_;  // a published block's hash, else 0
    std::vector<bool> is_published_;
};

}  // namespace weft::model
