#include "weft/kernels/isa.hpp"

namespace weft::kernels {

namespace {
Isa g_isa = avx512_compiled() ? Isa::avx512 : Isa::portable;
}

bool avx512_compiled() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    return true;
#else
    return false;
#endif
}

Isa kernel_isa() {
    return g_isa;
}

void set_kernel_isa(Isa isa) {
    g_isa = (isa == Isa::avx512 && !avx512_compiled()) ? Isa::portable : isa;
}

}  // namespace weft::kernels
