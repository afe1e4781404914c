#include "weft/kernels/hand_over.hpp"

#include <algorithm>
#include <cstring>

#include "weft/core/buffer.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/simd.hpp"

namespace weft::kernels {

const void* hand_over(const void* src, int64_t bytes) {
    WEFT_CHECK(bytes >= 0, "hand_over: bytes={}, expected >= 0", bytes);
    // 64-byte aligned (Buffer), grown to whole lines and never shrunk.
    thread_local Buffer buffer;
    const int64_t floats = std::max<int64_t>(16, (bytes + 63) / 64 * 16);
    if (buffer.size() < floats) buffer = Buffer(floats);
    char* to = reinterpret_cast<char*>(buffer.data());
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
