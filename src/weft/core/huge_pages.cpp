#include "weft/core/huge_pages.hpp"

#include <sys/mman.h>

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

}  // namespace weft
