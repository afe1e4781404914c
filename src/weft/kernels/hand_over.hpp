#pragma once
// A product's input handed from the thread that made it to the threads that share the product.
// When this host runs the two threads on different core complexes (most of its "fast memory"
// windows: a cache line passed between them takes about 170-350 ns, not 40), a thread that rewrites
// a buffer the other has read waits, store by store, for the other's copies to be invalidated: a
// 16-row product of SmolLM-135M's k (18 us alone) took 25 us on two threads, longer than on
// one. Written with streaming stores into a buffer of its own, the input goes to memory without
// those waits, and the other threads read it from there (docs/serving.md, "What the fast window
// is").
#include <cstdint>

namespace weft::kernels {

// A copy of `bytes` bytes at src in this thread's own 64-byte-aligned buffer, written with
// streaming stores and fenced: valid until this thread's next call.
const void* hand_over(const void* src, int64_t bytes);

}  // namespace weft::kernels
