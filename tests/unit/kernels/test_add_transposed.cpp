// add_transposed against the plain loop, on every path this CPU runs: whole 16×16 blocks, the
// ragged edges around them, and leading dimensions wider than the block.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/check.hpp"
#include "weft/kernels/add_transposed.hpp"
#include "weft/kernels/isa.hpp"

namespace weft::kernels {
namespace {

TEST(AddTransposed, MatchesTheLoopOnEveryPath) {
    struct Shape {
        int64_t rows, cols, ldd, lds;
    };
    const Shape shapes[] = {
        {16, 16, 16, 16}, {48, 32, 40, 50}, {37, 21, 21, 37}, {5, 70, 75, 9}, {300, 260, 260, 300}};
    for (Isa isa : {Isa::portable, Isa::avx512}) {
        if (!isa_available(isa)) continue;
        set_kernel_isa(isa);
        for (const Shape& sh : shapes) {
            auto src = test::random_vector(size_t(sh.cols * sh.lds), 1);
            auto dst = test::random_vector(size_t(sh.rows * sh.ldd), 2);
            std::vector<float> want = dst;
            for (int64_t r = 0; r < sh.rows; ++r)
                for (int64_t c = 0; c < sh.cols; ++c)
                    want[size_t(r * sh.ldd + c)] += src[size_t(c * sh.lds + r)];
            add_transposed(dst.data(), sh.ldd, src.data(), sh.lds, sh.rows, sh.cols);
            // One addition per element, in the same order: the same bits, and nothing past a
            // row's `cols` (the leading dimension's slack) is touched.
            EXPECT_EQ(dst, want) << isa_name(isa) << " rows=" << sh.rows << " cols=" << sh.cols;
        }
    }
    set_kernel_isa(default_isa());
}

}  // namespace
}  // namespace weft::kernels
