#include "weft/core/huge_pages.hpp"

#include <sys/mman.h>

namespace weft {

void* allocate_huge(std::size_t bytes) {
    bytes = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* p = std::aligned_alloc(kHugePageBytes, bytes);
    if (!p) throw std::bad_alloc();
    // Advice only: where huge pages are off (or always on) it changes nothing, and its failure
    // leaves ordinary pages.
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

}  // namespace weft
