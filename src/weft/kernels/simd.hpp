#pragma once
// <immintrin.h> for the AVX-512 kernel paths, where the compiler targets AVX-512.
#if defined(__AVX512F__)
// GCC 12's AVX-512 headers build their "undefined" pass-through operands from self-initialised
// locals, which -W(maybe-)uninitialized reports wherever an intrinsic is inlined (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
