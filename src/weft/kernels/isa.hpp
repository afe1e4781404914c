#pragma once
// Which instruction set the hand-written kernels use. Built with -march=native, the AVX-512 path
// exists where the compiler targets it; the portable path always exists, and tests force it to
// check that both agree.
namespace weft::kernels {

enum class Isa { portable, avx512 };

// The best path compiled in, unless a test has forced another.
Isa kernel_isa();
// Forces a path (tests). Asking for avx512 where it was not compiled in keeps portable.
void set_kernel_isa(Isa isa);
bool avx512_compiled();

// Whether a kernel takes its AVX-512 path now (compiled in and not forced off).
inline bool use_avx512() {
#if defined(__AVX512F__)
    return kernel_isa() == Isa::avx512;
#else
    return false;
#endif
}

}  // namespace weft::kernels
