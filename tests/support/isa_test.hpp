#pragma once
// A GoogleTest fixture run once per kernel path (portable, AVX-512): forces the path for the test
// and restores the default after it; the AVX-512 run is skipped where it was not compiled in.
#include <gtest/gtest.h>

#include "weft/kernels/isa.hpp"

namespace weft::test {

class IsaTest : public ::testing::TestWithParam<kernels::Isa> {
  protected:
    void SetUp() override {
        if (GetParam() == kernels::Isa::avx512 && !kernels::avx512_compiled())
            GTEST_SKIP() << "no AVX-512";
        kernels::set_kernel_isa(GetParam());
    }
    void TearDown() override {
        kernels::set_kernel_isa(kernels::avx512_compiled() ? kernels::Isa::avx512
                                                           : kernels::Isa::portable);
    }
};

}  // namespace weft::test
