#include "weft/model/kv_pool.hpp"

#include "weft/core/error.hpp"

namespace weft::model {

KvPool::KvPool(int64_t blocks, int64_t n_layer, int64_t width, int64_t block_tokens)
    : blocks_(blocks),
      n_layer_(n_layer),
      width_(width),
      block_tokens_(block_tokens),
      data_(blocks * n_layer * 2 * block_tokens * width),
      refs_(size_t(blocks), 0) {
    WEFT_CHECK(blocks >= 1 && block_tokens >= 1, "internal: a KV pool of {} blocks of {} positions",
               blocks, block_tokens);
    free_.reserve(size_t(blocks));
    for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

int32_t KvPool::allocate() {
    if (free_.empty()) return -1;
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[size_t(b)] = 1;
    return b;
}

void KvPool::retain(int32_t block) {
    WEFT_CHECK(refs_[size_t(block)] > 0, "internal: retaining free KV block {}", block);
    ++refs_[size_t(block)];
}

void KvPool::release(int32_t block) {
    WEFT_CHECK(refs_[size_t(block)] > 0, "internal: releasing free KV block {}", block);
    if (--refs_[size_t(block)] == 0) free_.push_back(block);
}

bool KvPool::grow(BlockTable& table, int64_t positions) {
    const int64_t need = blocks_for(positions) - int64_t(table.size());
    if (need <= 0) return true;
    if (need > free_blocks()) return false;
    for (int64_t i = 0; i < need; ++i) table.push_back(allocate());
    return true;
}

void KvPool::release_all(BlockTable& table) {
    for (int32_t b : table) release(b);
    table.clear();
}

}  // namespace weft::model
