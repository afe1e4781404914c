#include "weft/parallel/buffer_pool.hpp"

#include <algorithm>
#include <utility>

namespace weft::parallel {

std::optional<Buffer> BufferPool::reuse(int64_t n) {
    auto it = kept_.lower_bound(n);
    // No more than a quarter larger: a bucket's piece should not hold the embedding's buffer.
    if (it == kept_.end() || it->first > n + n / 4) return std::nullopt;
    Buffer b = std::move(it->second);
    kept_.erase(it);
    return b;
}

Buffer BufferPool::take(int64_t n) {
    if (std::optional<Buffer> b = reuse(n)) return std::move(*b);
    return Buffer(n);
}

Buffer BufferPool::take_zeroed(int64_t n) {
    std::optional<Buffer> b = reuse(n);
    if (!b) return Buffer(n);  // zero-filled
    std::fill_n(b->data(), n, 0.0f);
    return std::move(*b);
}

void BufferPool::give(Buffer&& b) {
    if (b.size() == 0) return;
    const int64_t n = b.size();
    kept_.emplace(n, std::move(b));
}

int64_t BufferPool::kept_bytes() const {
    int64_t bytes = 0;
    for (const auto& [n, b] : kept_) bytes += b.bytes();
    return bytes;
}

}  // namespace weft::parallel
