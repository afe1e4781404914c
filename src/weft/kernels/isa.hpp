#pragma once
// Which instruction set the hand-written kernels use. Built with -march=native, the AVX-512 path
// exists where the compiler targets it; the portable path always exists, and tests force it to
// check that the paths agree. Only attention has an AVX2 path (AVX2 + FMA, 8 lanes): on machines
// without AVX-512 it is attention, not the element-wise kernels, that dominates a step; under
// Isa::avx2 every other kernel takes its portable path.
namespace weft::kernels {

enum class Isa { portable, avx2, avx512 };

// The best path compiled in and supported by this CPU, unless a test has forced another.
Isa kernel_isa();
// Forces a path (tests). Asking for a path that is not available keeps portable.
void set_kernel_isa(Isa isa);
bool avx512_compiled();
// Whether `isa` is compiled in and this CPU runs it (portable always is).
bool isa_available(Isa isa);
// The path kernel_isa() returns when nothing is forced: the best available.
Isa default_isa();
const char* isa_name(Isa isa);

// Whether a kernel takes its AVX-512 path now (compiled in and not forced off).
inline bool use_avx512() {
#if defined(__AVX512F__)
    return kernel_isa() == Isa::avx512;
#else
    return false;
#endif
}

}  // namespace weft::kernels
