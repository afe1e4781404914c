#include "weft/kernels/isa.hpp"

namespace weft::kernels {

bool avx512_compiled() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    return true;
#else
    return false;
#endif
}

bool isa_available(Isa isa) {
    switch (isa) {
        case Isa::portable:
            return true;
        case Isa::avx2:
#if defined(__AVX2__) && defined(__FMA__)
            // Asked of the CPU too: a binary built elsewhere may run where AVX2 does not.
            __builtin_cpu_init();  // g_isa is initialised before libgcc's own constructor may run
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
            return false;
#endif
        case Isa::avx512:
            return avx512_compiled();
    }
    return false;
}

Isa default_isa() {
    if (isa_available(Isa::avx512)) return Isa::avx512;
    if (isa_available(Isa::avx2)) return Isa::avx2;
    return Isa::portable;
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::portable:
            return "portable";
        case Isa::avx2:
            return "avx2";
        case Isa::avx512:
            return "avx512";
    }
    return "unknown";
}

namespace {
Isa g_isa = default_isa();
}

Isa kernel_isa() {
    return g_isa;
}

void set_kernel_isa(Isa isa) {
    g_isa = isa_available(isa) ? isa : Isa::portable;
}

}  // namespace weft::kernels
