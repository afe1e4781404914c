#include "weft/parallel/buffer_pool.hpp"

#include <algorithm>
#include <utility>

namespace weft::parallel {

Buffer BufferPool::take(int64_t n) {
    auto it = kept_.lower_bound(n);
    // No more than a quarter larger: a bucket's piece should not hold the embedding's buffer.
    if (it == kept_.end() || it->first > n + n / 4) return Buffer(n);
    Buffer b = std::move(it->second);
    kept_.erase(it);
    return b;
}

Buffer BufferPool::take_zeroed(int64_t n) {
    auto it = kept_.lower_bound(n);
    if (it == kept_.end() || it->first > n + n / 4) return Buffer(n);  // zero-filled
    Buffer b = take(n);
    std::fill_n(b.data(), n, 0.0f);
    return b;
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
