#pragma once
// A GoogleTest fixture run once per kernel path: forces the path for the test and restores the
// default after it. A path this build or CPU lacks is skipped, visibly (GTEST_SKIP names it), so
// a run shows which paths it checked.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "weft/kernels/isa.hpp"

namespace weft::kernels {
// Failure messages name the path ("GetParam() = avx2") rather than dumping its bytes.
inline void PrintTo(Isa isa, std::ostream* os) {
    *os << isa_name(isa);
}
}  // namespace weft::kernels

namespace weft::test {

class IsaTest : public ::testing::TestWithParam<kernels::Isa> {
  protected:
    void SetUp() override {
        if (!kernels::isa_available(GetParam()))
            GTEST_SKIP() << kernels::isa_name(GetParam()) << " is not compiled in or not supported "
                         << "by this CPU";
        kernels::set_kernel_isa(GetParam());
    }
    void TearDown() override { kernels::set_kernel_isa(kernels::default_isa()); }
};

// Every path, for kernels that have all three (attention): INSTANTIATE_TEST_SUITE_P(Isas, Suite,
// test::kAllIsas, test::isa_param_name).
inline const auto kAllIsas =
    ::testing::Values(kernels::Isa::portable, kernels::Isa::avx2, kernels::Isa::avx512);

inline std::string isa_param_name(const ::testing::TestParamInfo<kernels::Isa>& info) {
    return kernels::isa_name(info.param);
}

}  // namespace weft::test
