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
#include <vector>

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

// Many arrays, each under a huge page, that live as long as their owner (a model's bf16 weight
// copies: about 2 MiB a layer's product on SmolLM-135M's shape, each alone on 4 KiB pages), in
// shared 2 MiB-aligned chunks whose huge pages are all advised. Space is never given back before
// the arena goes; a huge page is resident once any of it is touched, so the memory past what the
// arrays need is at most the part of a huge page each chunk's last array leaves.
class HugePageArena {
  public:
    HugePageArena() = default;
    HugePageArena(HugePageArena&&) noexcept = default;
    HugePageArena& operator=(HugePageArena&&) noexcept = default;
    // `bytes` untouched, 64-byte aligned, valid while the arena lives. Throws std::bad_alloc.
    void* take(std::size_t bytes);
    // Bytes of the chunks taken from the system (touched or not).
    std::size_t reserved() const;

  private:
    struct Free {
        void operator()(void* p) const noexcept { std::free(p); }
    };
    struct Chunk {
        std::unique_ptr<void, Free> base;
        std::size_t size = 0, used = 0;
    };
    std::vector<Chunk> chunks_;
};

}  // namespace weft
