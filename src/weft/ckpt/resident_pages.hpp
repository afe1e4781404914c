#pragma once

#include <cstddef>

namespace weft::ckpt {

// Drops the pages of [begin, begin + bytes), inside a read-only file mapping [map, map +
// map_size), from the process's resident set. A mapped file's pages count in the resident size
// while mapped, so a reader that copies a whole file out of its mapping would otherwise hold it
// twice at its peak. The pages stay in the page cache; a later read faults them back in.
void drop_resident_pages(const void* map, size_t map_size, const void* begin, size_t bytes);

}  // namespace weft::ckpt
