#include "weft/ckpt/resident_pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace weft::ckpt {

void drop_resident_pages(const void* map, size_t map_size, const void* begin, size_t bytes) {
    if (!map || bytes == 0) return;
    static const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const auto base = reinterpret_cast<uintptr_t>(map);
    // Whole pages from the one holding `begin` (a neighbour sharing it faults it back).
    const uintptr_t from = std::max(reinterpret_cast<uintptr_t>(begin) & ~(page - 1), base);
    const uintptr_t to = std::min(reinterpret_cast<uintptr_t>(begin) + bytes, base + map_size);
    if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

}  // namespace weft::ckpt
