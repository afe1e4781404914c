// matmul_rows: the product against a double-precision reference, and each row the same bits
// whatever M, thread count or kernel path (the property serving's batch invariance rests on).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "weft/kernels/isa.hpp"
#include "weft/kernels/matmul_rows.hpp"
#include "weft/kernels/precision.hpp"
#include "weft/kernels/swiglu.hpp"

namespace weft::kernels {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0, 1);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

// Shapes with tails in every dimension a fast path might tile.
struct Shape {
    int64_t K, N;
};
// Few rows take the streaming tile while their inputs are small (M * K * 4 bytes <= 16 KB in
// fp32): at K = 576 up to 7 rows, at K = 1536 up to 2, so both paths meet in one batch size.
const Shape kShapes[] = {{1, 1}, {7, 5}, {64, 48}, {129, 67}, {576, 192}, {1536, 21}};

TEST(MatmulRows, MatchesReference) {
    for (auto [K, N] : kShapes) {
        const int64_t M = 9;
        auto x = randn(size_t(M * K), 1), w = randn(size_t(N * K), 2), b = randn(size_t(N), 3);
        std::vector<float> out(size_t(M * N));
        matmul_rows(out.data(), x.data(), w.data(), b.data(), M, K, N);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double s = b[size_t(n)];
                for (int64_t k = 0; k < K; ++k)
                    s += double(x[size_t(m * K + k)]) * w[size_t(n * K + k)];
                EXPECT_NEAR(out[size_t(m * N + n)], s, 1e-5 * (1 + std::sqrt(double(K))))
                    << "K " << K << " N " << N << " m " << m << " n " << n;
            }
    }
}

TEST(MatmulRowsBf16, MatchesRoundedReference) {
    for (auto [K, N] : kShapes) {
        const int64_t M = 9;
        auto x = randn(size_t(M * K), 4), w = randn(size_t(N * K), 5);
        RowWeightsBf16 w16(w.data(), N, K);
        std::vector<float> out(size_t(M * N));
        matmul_rows_bf16(out.data(), x.data(), w16, nullptr, M);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k)
                    s += double(bf16_to_fp32(fp32_to_bf16(x[size_t(m * K + k)]))) *
                         bf16_to_fp32(fp32_to_bf16(w[size_t(n * K + k)]));
                EXPECT_NEAR(out[size_t(m * N + n)], s, 1e-5 * (1 + std::sqrt(double(K))));
            }
    }
}

// A copy in an arena (a serving model's) holds the bits of one in its own allocation, and so do
// its products.
TEST(MatmulRowsBf16, ArenaCopyIsTheSameBits) {
    HugePageArena arena;
    for (auto [K, N] : kShapes) {
        const int64_t M = 3;
        auto x = randn(size_t(M * K), 6), w = randn(size_t(N * K), 7);
        RowWeightsBf16 own(w.data(), N, K), shared(w.data(), N, K, arena);
        ASSERT_EQ(shared.w.size(), size_t(RowWeightsBf16::packed_size(N, K)));
        EXPECT_EQ(std::memcmp(own.w.data(), shared.w.data(), shared.w.size() * 2), 0) << K;
        std::vector<float> a(size_t(M * N)), b(a.size());
        matmul_rows_bf16(a.data(), x.data(), own, nullptr, M);
        matmul_rows_bf16(b.data(), x.data(), shared, nullptr, M);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << K;
    }
}

// The packed copy holds each weight rounded to bf16 where RowWeightsBf16 says, and zeros in the
// padding past K and past N.
TEST(MatmulRowsBf16, PackedWhereDocumented) {
    constexpr int64_t C = RowWeightsBf16::kPackCols, S = RowWeightsBf16::kPackK;
    for (auto [K, N] : kShapes) {
        auto w = randn(size_t(N * K), 16);
        RowWeightsBf16 p(w.data(), N, K);
        const int64_t steps = (K + S - 1) / S, tiles = (N + C - 1) / C;
        ASSERT_EQ(p.w.size(), size_t(tiles * steps * C * S)) << K << " " << N;
        std::vector<uint16_t> want(p.w.size(), 0);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
                want[size_t(((n / C * steps + k / S) * C + n % C) * S + k % S)] =
                    fp32_to_bf16(w[size_t(n * K + k)]);
        EXPECT_EQ(0, std::memcmp(p.w.data(), want.data(), want.size() * 2)) << K << " " << N;
    }
}

// Row m of a product of M rows equals, bitwise, the product of that row alone, for every M up to
// past several of the fast path's 6-row tiles, and any position of the row in the batch.
template <class Product>
void expect_rows_invariant(Product product, int64_t K, int64_t N) {
    const int64_t max_m = 70;
    auto x = randn(size_t(max_m * K), 6);
    std::vector<float> alone(size_t(max_m * N));
    for (int64_t m = 0; m < max_m; ++m) product(alone.data() + m * N, x.data() + m * K, 1);
    for (int64_t M = 1; M <= max_m; ++M) {
        const int64_t first = max_m - M;  // the batch's rows end at the last row
        std::vector<float> out(size_t(M * N));
        product(out.data(), x.data() + first * K, M);
        ASSERT_EQ(0, std::memcmp(out.data(), alone.data() + first * N, out.size() * sizeof(float)))
            << "M " << M << " K " << K << " N " << N;
    }
}

TEST(MatmulRows, EveryRowTheSameBitsForAnyM) {
    for (auto [K, N] : kShapes) {
        auto w = randn(size_t(N * K), 7), b = randn(size_t(N), 8);
        expect_rows_invariant([&](float* out, const float* x,
                                  int64_t M) { matmul_rows(out, x, w.data(), b.data(), M, K, N); },
                              K, N);
    }
}

TEST(MatmulRowsBf16, EveryRowTheSameBitsForAnyM) {
    for (auto [K, N] : kShapes) {
        auto w = randn(size_t(N * K), 9), b = randn(size_t(N), 10);
        RowWeightsBf16 w16(w.data(), N, K);
        expect_rows_invariant([&](float* out, const float* x,
                                  int64_t M) { matmul_rows_bf16(out, x, w16, b.data(), M); },
                              K, N);
    }
}

// The same bits from every thread count and kernel path: the columns are split differently over
// the threads (the largest shape is past the size below which one thread computes it), and the
// portable path computes the vector path's order lane by lane.
template <class Product>
void expect_same_bits_everywhere(Product product, int64_t M, int64_t K, int64_t N,
                                 const char* what) {
    auto x = randn(size_t(M * K), 11);
    std::vector<float> want(size_t(M * N));
    product(want.data(), x.data(), M);
    const int initial = omp_get_max_threads();
    for (Isa isa : {Isa::avx512, Isa::portable}) {
        if (!isa_available(isa)) continue;
        set_kernel_isa(isa);
        for (int threads : {1, 2, 3, 4}) {
            omp_set_num_threads(threads);
            std::vector<float> got(size_t(M * N));
            product(got.data(), x.data(), M);
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                << what << " M " << M << " K " << K << " N " << N << ", " << isa_name(isa) << ", "
                << threads << " threads";
        }
    }
    omp_set_num_threads(initial);
    set_kernel_isa(default_isa());
}

TEST(MatmulRows, SameBitsForAnyThreadsAndPath) {
    for (auto [M, K, N] : {std::array<int64_t, 3>{1, 576, 192},
                           {4, 576, 200},
                           {8, 576, 200},
                           {13, 129, 67},
                           {40, 576, 200}}) {
        auto w = randn(size_t(N * K), 12), b = randn(size_t(N), 13);
        expect_same_bits_everywhere(
            [&](float* out, const float* x, int64_t m) {
                matmul_rows(out, x, w.data(), b.data(), m, K, N);
            },
            M, K, N, "fp32");
    }
}

TEST(MatmulRowsBf16, SameBitsForAnyThreadsAndPath) {
    for (auto [M, K, N] : {std::array<int64_t, 3>{1, 576, 192},
                           {4, 576, 200},
                           {8, 1536, 60},
                           {13, 129, 67},
                           {40, 576, 200}}) {
        auto w = randn(size_t(N * K), 14), b = randn(size_t(N), 15);
        RowWeightsBf16 w16(w.data(), N, K);
        expect_same_bits_everywhere([&](float* out, const float* x,
                                        int64_t m) { matmul_rows_bf16(out, x, w16, b.data(), m); },
                                    M, K, N, "bf16");
    }
}

// The fused gate/up product with SwiGLU against its unfused order (the product, then
// swiglu_forward row by row), bitwise: every M past several 6-row tiles and both few-row paths
// (paired up to 16 rows, the unfused order past them), F with a vector tail (20, 40) and not whole
// tiles (6: the unfused order), every thread count and kernel path. Each thread applies SwiGLU to
// the columns of its chunks, which move with M and the threads.
template <class Fused, class Product>
void expect_swiglu_fused(Fused fused, Product product, int64_t K, int64_t F, const char* what) {
    const int initial = omp_get_max_threads();
    for (Isa isa : {Isa::avx512, Isa::portable}) {
        if (!isa_available(isa)) continue;
        set_kernel_isa(isa);
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            for (int64_t M : {1, 2, 3, 5, 8, 13, 16, 17, 40}) {
                auto x = randn(size_t(M * K), 16);
                std::vector<float> gu(size_t(M * 2 * F)), want(size_t(M * F)), got(size_t(M * F));
                product(gu.data(), x.data(), M);
                for (int64_t m = 0; m < M; ++m)
                    swiglu_forward(want.data() + m * F, gu.data() + m * 2 * F, 1, F);
                fused(got.data(), x.data(), M);
                ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                    << what << " M " << M << " K " << K << " F " << F << ", " << isa_name(isa)
                    << ", " << threads << " threads";
            }
        }
    }
    omp_set_num_threads(initial);
    set_kernel_isa(default_isa());
}

TEST(MatmulRows, SwigluFusedIsTheProductThenSwiglu) {
    for (auto [K, F] : {std::array<int64_t, 2>{7, 6}, {64, 20}, {576, 40}, {576, 384}}) {
        auto w = randn(size_t(2 * F * K), 17);
        expect_swiglu_fused([&](float* out, const float* x,
                                int64_t M) { matmul_rows_swiglu(out, x, w.data(), M, K, F); },
                            [&](float* out, const float* x, int64_t M) {
                                matmul_rows(out, x, w.data(), nullptr, M, K, 2 * F);
                            },
                            K, F, "fp32");
        RowWeightsBf16 w16(w.data(), 2 * F, K);
        expect_swiglu_fused(
            [&](float* out, const float* x, int64_t M) { matmul_rows_bf16_swiglu(out, x, w16, M); },
            [&](float* out, const float* x, int64_t M) {
                matmul_rows_bf16(out, x, w16, nullptr, M);
            },
            K, F, "bf16");
    }
}

}  // namespace
}  // namespace weft::kernels
