#include "weft/core/huge_pages.hpp"

#include <sys/mman.h>

#include <algorithm>

namespace weft {

void* allocate_huge(std::size_t bytes) {
    const std::size_t whole = bytes / kHugePageBytes * kHugePageBytes;
    void* p = std::aligned_alloc(kHugePageBytes,
                                 (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    if (!p) throw std::bad_alloc();
    // Only the whole huge pages: a tail advised too would take a whole huge page when touched,
    // resident memory past what the memory estimate counts (up to 2 MiB a buffer). Advice only:
    // where huge pages are off (or always on) it changes nothing, and its failure leaves ordinary
    // pages.
    madvise(p, whole, MADV_HUGEPAGE);
    return p;
}

namespace {
// A chunk holds several layers' copies (the head's, 57 MB on SmolLM-135M, takes its own): few
// chunks, so little of each one's last huge page goes unused.
constexpr std::size_t kArenaChunkBytes = 16 * kHugePageBytes;
constexpr std::size_t kArenaAlign = 64;
}  // namespace

void* HugePageArena::take(std::size_t bytes) {
    bytes = (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    // First fit: a large array that opens a chunk of its own leaves the earlier chunk's rest to
    // the smaller ones after it.
    for (Chunk& c : chunks_)
        if (c.size - c.used >= bytes) {
            void* p = static_cast<char*>(c.base.get()) + c.used;
            c.used += bytes;
            return p;
        }
    const std::size_t size =
        std::max(kArenaChunkBytes, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    Chunk c{std::unique_ptr<void, Free>(allocate_huge(size)), size, bytes};
    void* p = c.base.get();
    chunks_.push_back(std::move(c));
    return p;
}

std::size_t HugePageArena::reserved() const {
    std::size_t n = 0;
    for (const Chunk& c : chunks_) n += c.size;
    return n;
}

}  // namespace weft
