#include "weft/kernels/hand_over.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "weft/core/error.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

namespace {

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};

}  // namespace

const void* hand_over(const void* src, int64_t bytes) {
    WEFT_CHECK(bytes >= 0, "hand_over: bytes={}, expected >= 0", bytes);
    thread_local std::unique_ptr<char, FreeDeleter> buffer;
    thread_local int64_t capacity = 0;
    if (!buffer || bytes > capacity) {
        capacity = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
        buffer.reset(static_cast<char*>(std::aligned_alloc(64, std::size_t(capacity))));
        WEFT_CHECK(buffer, "hand_over: cannot allocate {} bytes", capacity);
    }
    char* to = buffer.get();
    const char* from = static_cast<const char*>(src);
    int64_t i = 0;
#if defined(__SSE2__)
    // Whole lines streamed (four 16-byte stores fill one write-combining buffer); the tail as
    // usual.
    for (; i + 64 <= bytes; i += 64)
        for (int j = 0; j < 64; j += 16)
            _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + j),
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + j)));
    _mm_sfence();
#endif
    std::memcpy(to + i, from + i, std::size_t(bytes - i));
    return to;
}

}  // namespace weft::kernels
