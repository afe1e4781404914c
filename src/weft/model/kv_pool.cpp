#include "weft/model/kv_pool.hpp"

#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::model {

KvPool::KvPool(int64_t blocks, int64_t n_layer, int64_t width, int64_t head_size,
               int64_t block_tokens, bool bf16)
    : blocks_(blocks),
      n_layer_(n_layer),
      width_(width),
      head_size_(head_size),
      heads_(head_size > 0 ? width / head_size : 0),
      block_tokens_(block_tokens),
      bf16_(bf16),
      data_(bf16 ? 0 : blocks * n_layer * 2 * block_tokens * width),
      half_(bf16 ? size_t(blocks * n_layer * 2 * block_tokens * width) : 0),
      refs_(size_t(blocks), 0),
      free_at_(size_t(blocks)),
      hash_of_(size_t(blocks), 0),
      is_published_(size_t(blocks), false) {
    WEFT_CHECK(blocks >= 1 && block_tokens >= 1, "internal: a KV pool of {} blocks of {} positions",
               blocks, block_tokens);
    WEFT_CHECK(head_size >= 1 && width % head_size == 0,
               "internal: a KV pool {} wide in heads of {}", width, head_size);
    for (int64_t b = 0; b < blocks; ++b)
        free_at_[size_t(b)] = free_.insert(free_.end(), int32_t(b));
}

void KvPool::copy_slot(int64_t from, int64_t to) {
    WEFT_CHECK(
        from >= 0 && to >= 0 && from < blocks_ * block_tokens_ && to < blocks_ * block_tokens_,
        "internal: a copy from slot {} to {} of a pool of {} slots", from, to,
        blocks_ * block_tokens_);
    for (int layer = 0; layer < n_layer_; ++layer)
        for (int kv = 0; kv < 2; ++kv)
            for (int64_t h = 0; h < heads_; ++h) {
                const int64_t f = at_slot(from, layer, kv, h), t = at_slot(to, layer, kv, h);
                if (bf16_)
                    std::copy_n(half_.data() + f, head_size_, half_.data() + t);
                else
                    std::copy_n(data_.data() + f, head_size_, data_.data() + t);
            }
}

int32_t KvPool::allocate() {
    if (free_.empty()) return -1;
    const int32_t b = free_.front();
    free_.pop_front();
    refs_[size_t(b)] = 1;
    if (is_published_[size_t(b)]) {  // its keys and values are about to be overwritten
        published_.erase(hash_of_[size_t(b)]);
        is_published_[size_t(b)] = false;
    }
    return b;
}

void KvPool::retain(int32_t block) {
    if (refs_[size_t(block)] == 0) {
        WEFT_CHECK(is_published_[size_t(block)], "internal: retaining free KV block {}", block);
        free_.erase(free_at_[size_t(block)]);
    }
    ++refs_[size_t(block)];
}

void KvPool::release(int32_t block) {
    WEFT_CHECK(refs_[size_t(block)] > 0, "internal: releasing free KV block {}", block);
    if (--refs_[size_t(block)] == 0) free_at_[size_t(block)] = free_.insert(free_.end(), block);
}

uint64_t KvPool::block_hash(uint64_t prefix, std::span<const int32_t> tokens) {
    // FNV-1a over the prefix's hash and the tokens, then a final mix (splitmix64's).
    uint64_t h = 1469598103934665603ull ^ prefix;
    for (int32_t t : tokens) {
        h ^= uint64_t(uint32_t(t));
        h *= 1099511628211ull;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

int32_t KvPool::published(uint64_t hash) const {
    const auto it = published_.find(hash);
    return it == published_.end() ? -1 : it->second;
}

void KvPool::publish(int32_t block, uint64_t hash) {
    if (is_published_[size_t(block)] || !published_.emplace(hash, block).second) return;
    hash_of_[size_t(block)] = hash;
    is_published_[size_t(block)] = true;
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
