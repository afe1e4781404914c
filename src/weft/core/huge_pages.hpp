#pragma once
// Memory for large arrays that are streamed whole (the weights a decode step reads once per
// token): placed on 2 MiB boundaries and advised to the kernel as transparent huge pages before
// it is first touched. Where huge pages are enabled only on request
// (/sys/kernel/mm/transparent_hugepage/enabled = madvise, a common default), 4 KiB pages cost a
// TLB miss every 4 KiB of a stream that reads half a gigabyte a token.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace weft {

inline constexpr std::size_t kHugePageBytes = std::size_t(1) << 21;

// `bytes`, 2 MiB-aligned and untouched, its whole huge pages advised (the tail keeps 4 KiB
// pages); free with std::free. Throws std::bad_alloc.
void* allocate_huge(std::size_t bytes);

// A std::vector allocator that takes allocate_huge for arrays of a huge page or more.
template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        if (n * sizeof(T) >= kHugePageBytes) return static_cast<T*>(allocate_huge(n * sizeof(T)));
        return std::allocator<T>().allocate(n);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (n * sizeof(T) >= kHugePageBytes) return std::free(p);
        std::allocator<T>().deallocate(p, n);
    }
    template <class U>
    bool operator==(const HugePageAllocator<U>&) const noexcept {
        return true;
    }
};

}  // namespace weft
