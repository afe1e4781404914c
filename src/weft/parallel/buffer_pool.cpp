#include "weft/parallel/buffer_pool.hpp"

#include <algorithm>
#include <optional>
#include <utility>

namespace weft::parallel {

namespace {

// The kept buffer a take of n elements hands back, if any (removed from `kept`): the smallest of
// at least n and no more than a quarter larger, so that a bucket's piece does not hold the
// embedding's buffer.
template <class B>
std::optional<B> reuse(std::multimap<int64_t, B>& kept, int64_t n) {
    auto it = kept.lower_bound(n);
    if (it == kept.end() || it->first > n + n / 4) return std::nullopt;
    B b = std::move(it->second);
    kept.erase(it);
    return b;
}

template <class B>
void keep(std::multimap<int64_t, B>& kept, B&& b) {
    if (b.size() == 0) return;
    const auto n = int64_t(b.size());
    kept.emplace(n, std::move(b));
}

}  // namespace

Buffer BufferPool::take(int64_t n) {
    if (std::optional<Buffer> b = reuse(kept_, n)) return std::move(*b);
    return Buffer(n);
}

Buffer BufferPool::take_zeroed(int64_t n) {
    std::optional<Buffer> b = reuse(kept_, n);
    if (!b) return Buffer(n);  // zero-filled
    std::fill_n(b->data(), n, 0.0f);
    return std::move(*b);
}

void BufferPool::give(Buffer&& b) {
    keep(kept_, std::move(b));
}

Bf16Buffer BufferPool::take_bf16(int64_t n) {
    if (std::optional<Bf16Buffer> b = reuse(kept_bf16_, n)) return std::move(*b);
    return Bf16Buffer(size_t(n));
}

void BufferPool::give(Bf16Buffer&& b) {
    keep(kept_bf16_, std::move(b));
}

int64_t BufferPool::kept_bytes() const {
    int64_t bytes = 0;
    for (const auto& [n, b] : kept_) bytes += b.bytes();
    for (const auto& [n, b] : kept_bf16_) bytes += n * int64_t(sizeof(uint16_t));
    return bytes;
}

}  // namespace weft::parallel
