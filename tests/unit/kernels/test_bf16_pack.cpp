// The hand packing of bf16 products' B operands (kernels/bf16_pack.hpp) against oneDNN's reorder
// into the same layout: the same bytes, for each source it takes (fp32 row-major, fp32 stored
// transposed, bf16 row-major), on the shapes of GPT-2's and Llama's products and padded ones, with
// normal values, ties, denormals, infinities and NaN; and the layouts it leaves to oneDNN.
#include <gtest/gtest.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "support/check.hpp"
#include "weft/kernels/bf16_pack.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::kernels {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// The weights layout oneDNN's bf16 matmul asks for on [M, K] x [K, N].
dnnl::memory::desc packed_layout(const dnnl::engine& e, int64_t M, int64_t K, int64_t N) {
    dnnl::memory::desc a({M, K}, dt::bf16, dims{K, 1}), c({M, N}, dt::f32, dims{N, 1});
    dnnl::memory::desc b({K, N}, dt::bf16, dnnl::memory::format_tag::any);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), e).weights_desc();
}

std::vector<float> values(size_t n, uint64_t seed) {
    std::vector<float> v = test::random_vector(n, seed, 4.0f);
    const uint32_t specials[] = {0x3f808000, 0x3f818000, 0x00400000, 0x80000001,
                                 0x7f800000, 0xff800000, 0x7fc00000, 0x7f7fffff};
    for (size_t i = 0; i < std::size(specials) && i < n; ++i)
        std::memcpy(&v[i * 7 % n], &specials[i], sizeof(float));
    return v;
}

// Packs `src` (plain) both ways; returns whether the hand packing took it.
bool same_as_reorder(const dnnl::engine& e, const dnnl::memory::desc& packed,
                     const dnnl::memory::desc& plain, const void* src) {
    std::vector<uint16_t> want(packed.get_size() / 2, 0x5555), got(want.size(), 0xaaaa);
    dnnl::stream stream(e);
    dnnl::memory from(plain, e, const_cast<void*>(src)), to(packed, e, want.data());
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    if (!detail::pack_b_bf16(got.data(), packed, src, plain)) return false;
    EXPECT_EQ(got, want);
    return true;
}

TEST(Bf16Pack, GivesOneDnnReordersBytes) {
    if (!bf16_products_native()) GTEST_SKIP() << "bf16 products are emulated on this CPU";
    const dnnl::engine e(dnnl::engine::kind::cpu, 0);
    struct Shape {
        int64_t M, K, N;
    };
    int taken = 0;
    // GPT-2's forward (K = C or 4C), input gradient and weight gradient (K = tokens) products,
    // Llama's (C = 576, F = 1536), a tensor-parallel half.
    // Padded: the classifier's vocabulary (50257) as N (logits) and as K (dx), here 1000.
    for (Shape s :
         {Shape{256, 768, 2304}, Shape{256, 3072, 768}, Shape{256, 2304, 768},
          Shape{2304, 256, 768}, Shape{256, 576, 960}, Shape{256, 1536, 576}, Shape{256, 768, 1152},
          Shape{256, 768, 1000}, Shape{256, 1000, 768}, Shape{16, 37, 70}}) {
        SCOPED_TRACE(testing::Message() << "K=" << s.K << " N=" << s.N);
        const dnnl::memory::desc packed = packed_layout(e, s.M, s.K, s.N);
        const std::vector<float> x = values(size_t(s.K * s.N), uint64_t(s.K + s.N));
        std::vector<uint16_t> x16(x.size());
        convert_fp32_to_bf16(x16.data(), x.data(), 1, int64_t(x.size()), int64_t(x.size()));
        taken += same_as_reorder(e, packed, {{s.K, s.N}, dt::f32, dims{s.N, 1}}, x.data());
        taken += same_as_reorder(e, packed, {{s.K, s.N}, dt::f32, dims{1, s.K}}, x.data());
        taken += same_as_reorder(e, packed, {{s.K, s.N}, dt::bf16, dims{s.N, 1}}, x16.data());
    }
    // On AVX512-BF16 without AMX oneDNN 2.6 picks the one layout handled, and every case must be
    // taken; with AMX it picks its own and the reorder runs, compared with nothing here.
    if (dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_bf16)
        EXPECT_EQ(taken, 30);
    else
        GTEST_SKIP() << "oneDNN packs for another ISA here (" << taken << " of 30 taken)";
}

TEST(Bf16Pack, LeavesOtherLayoutsToOneDnn) {
    std::vector<float> x(size_t(64 * 128), 1.0f);
    std::vector<uint16_t> dst(size_t(64 * 128), 0x1234);
    const dnnl::memory::desc plain({64, 128}, dt::f32, dims{128, 1});
    // A plain layout, and another blocking (int8's 4-element groups).
    EXPECT_FALSE(
        detail::pack_b_bf16(dst.data(), {{64, 128}, dt::bf16, dims{128, 1}}, x.data(), plain));
    EXPECT_FALSE(detail::pack_b_bf16(
        dst.data(), {{64, 128}, dt::bf16, dnnl::memory::format_tag::BA16a64b4a}, x.data(), plain));
    for (uint16_t w : dst) ASSERT_EQ(w, 0x1234);
}

}  // namespace
}  // namespace weft::kernels
