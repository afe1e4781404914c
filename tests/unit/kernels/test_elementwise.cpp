#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/isa.hpp"

namespace wk = weft::kernels;
using weft::test::max_rel_diff;
using weft::test::random_vector;

namespace {

class Elementwise : public weft::test::IsaTest {};

// One fp32 addition is exact against the double sum rounded once, so these compare bit for bit.
TEST_P(Elementwise, AddMatchesReferenceAndAllowsAliasing) {
    for (int64_t n : {1, 15, 17, 1000 + 9, 3 * 16384 + 11}) {
        const auto a = random_vector(n, 1), b = random_vector(n, 2);
        std::vector<float> ref(n);
        for (int64_t i = 0; i < n; ++i) ref[i] = float(double(a[i]) + double(b[i]));

        std::vector<float> out(n);
        wk::add_forward(out.data(), a.data(), b.data(), n);
        EXPECT_EQ(out, ref) << n;
        std::vector<float> alias_a = a, alias_b = b;
        wk::add_forward(alias_a.data(), alias_a.data(), b.data(), n);
        wk::add_forward(alias_b.data(), a.data(), alias_b.data(), n);
        EXPECT_EQ(alias_a, ref) << n;
        EXPECT_EQ(alias_b, ref) << n;
        std::vector<float> acc = a;
        wk::add_inplace(acc.data(), b.data(), n);
        EXPECT_EQ(acc, ref) << n;
    }
}

struct Embedding {
    int64_t B, T, C, V, P, pos0;
    std::vector<int32_t> tokens;
    std::vector<float> wte, wpe;
};

// Few distinct tokens so that the dwte scatter collides on rows.
Embedding make_embedding(int64_t B, int64_t T, int64_t C, int64_t pos0) {
    const int64_t V = 5, P = pos0 + T + 2;
    Embedding e{B,
                T,
                C,
                V,
                P,
                pos0,
                std::vector<int32_t>(B * T),
                random_vector(V * C, 1),
                random_vector(P * C, 2)};
    for (int64_t i = 0; i < B * T; ++i) e.tokens[i] = int32_t((i * 7 + i / 3) % V);
    return e;
}

TEST_P(Elementwise, EmbeddingMatchesReference) {
    for (auto [B, T, C, pos0] :
         {std::array<int64_t, 4>{2, 3, 17, 0}, {3, 5, 33, 4}, {4, 64, 200, 1}, {2, 32, 768, 3}}) {
        const Embedding e = make_embedding(B, T, C, pos0);
        std::vector<float> out(B * T * C);
        wk::embedding_forward(out.data(), e.tokens.data(), e.wte.data(), e.wpe.data(), B, T, C,
                              pos0);
        const auto dout = random_vector(B * T * C, 3);
        // Pre-filled gradients: both must be added to.
        const auto dwte0 = random_vector(e.V * C, 4), dwpe0 = random_vector(e.P * C, 5);
        std::vector<double> ref_out(B * T * C), ref_dwte(dwte0.begin(), dwte0.end()),
            ref_dwpe(dwpe0.begin(), dwpe0.end());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t c = 0; c < C; ++c) {
                    const int64_t bt = b * T + t, tok = e.tokens[bt], p = pos0 + t;
                    ref_out[bt * C + c] = double(e.wte[tok * C + c]) + e.wpe[p * C + c];
                    ref_dwte[tok * C + c] += dout[bt * C + c];
                    ref_dwpe[p * C + c] += dout[bt * C + c];
                }
        std::vector<float> dwte = dwte0, dwpe = dwpe0;
        wk::embedding_backward(dwte.data(), dwpe.data(), dout.data(), e.tokens.data(), B, T, C,
                               pos0);
        auto as_float = [](const std::vector<double>& v) {
            return std::vector<float>(v.begin(), v.end());
        };
        // out is one rounding from exact; the gradients are fp32 sums of up to B·T/V terms that
        // cancel, so 1e-4 relative above an absolute floor of 1e-2.
        EXPECT_LT(max_rel_diff(out.data(), as_float(ref_out).data(), out.size()), 1e-6);
        EXPECT_LT(max_rel_diff(dwte.data(), as_float(ref_dwte).data(), dwte.size(), 1e-2), 1e-4);
        EXPECT_LT(max_rel_diff(dwpe.data(), as_float(ref_dwpe).data(), dwpe.size(), 1e-2), 1e-4);

        // Either gradient may be skipped; the other must come out the same.
        std::vector<float> only_wte = dwte0, only_wpe = dwpe0;
        wk::embedding_backward(only_wte.data(), nullptr, dout.data(), e.tokens.data(), B, T, C,
                               pos0);
        wk::embedding_backward(nullptr, only_wpe.data(), dout.data(), e.tokens.data(), B, T, C,
                               pos0);
        EXPECT_EQ(only_wte, dwte);
        EXPECT_EQ(only_wpe, dwpe);
    }
}

// L = Σ g ⊙ embedding(wte, wpe) with random g. The loss is linear in the tables, so central
// differences are exact up to fp32 rounding: |fd - analytic| ≤ 1e-3 · (|analytic| + 0.1).
TEST_P(Elementwise, EmbeddingBackwardMatchesFiniteDifferences) {
    const int64_t B = 2, T = 4, C = 19, pos0 = 1;
    Embedding e = make_embedding(B, T, C, pos0);
    const auto g = random_vector(B * T * C, 6);
    std::vector<float> out(B * T * C);
    auto loss = [&] {
        wk::embedding_forward(out.data(), e.tokens.data(), e.wte.data(), e.wpe.data(), B, T, C,
                              pos0);
        double l = 0;
        for (size_t i = 0; i < out.size(); ++i) l += double(g[i]) * out[i];
        return l;
    };
    std::vector<float> dwte(e.V * C, 0.0f), dwpe(e.P * C, 0.0f);
    wk::embedding_backward(dwte.data(), dwpe.data(), g.data(), e.tokens.data(), B, T, C, pos0);
    auto check = [&](std::vector<float>& table, const std::vector<float>& grad, const char* what) {
        std::vector<size_t> all(table.size());
        for (size_t i = 0; i < all.size(); ++i) all[i] = i;
        const auto fd = weft::test::finite_difference(table, loss, all);
        for (size_t i = 0; i < all.size(); ++i)
            EXPECT_NEAR(fd[i], grad[i], 1e-3 * (std::abs(grad[i]) + 0.1))
                << what << "[" << i << "]";
    };
    check(e.wte, dwte, "dwte");
    check(e.wpe, dwpe, "dwpe");
}

TEST_P(Elementwise, EmbeddingRejectsNegativeToken) {
    std::vector<int32_t> tokens = {0, -1};
    std::vector<float> table(4, 0.0f), out(4);
    EXPECT_THROW(
        wk::embedding_forward(out.data(), tokens.data(), table.data(), table.data(), 1, 2, 2),
        weft::Error);
}

// Vocabulary-parallel: the shards' lookups (wpe from one shard only) add up to the whole lookup
// bit for bit (each element is one wte value plus zeros), and the shards' backwards fill the
// rows of the whole dwte (the padding rows of the last shard stay zero).
TEST_P(Elementwise, EmbeddingShardsAddUpToTheWholeTable) {
    const int64_t B = 3, T = 5, C = 67, pos0 = 2, shards = 3;
    const Embedding e = make_embedding(B, T, C, pos0);
    const int64_t Vs = (e.V + shards - 1) / shards;
    std::vector<float> whole(B * T * C), sum(B * T * C, 0.0f), part(B * T * C);
    wk::embedding_forward(whole.data(), e.tokens.data(), e.wte.data(), e.wpe.data(), B, T, C, pos0);
    const auto dout = random_vector(B * T * C, 3);
    std::vector<float> dwte(e.V * C, 0.0f), dwte_shards(shards * Vs * C, 0.0f);
    wk::embedding_backward(dwte.data(), nullptr, dout.data(), e.tokens.data(), B, T, C, pos0);
    std::vector<float> wte(shards * Vs * C, 0.0f);  // padded to whole shards
    std::copy(e.wte.begin(), e.wte.end(), wte.begin());
    for (int64_t s = 0; s < shards; ++s) {
        wk::embedding_forward_shard(part.data(), e.tokens.data(), wte.data() + s * Vs * C,
                                    s == 0 ? e.wpe.data() : nullptr, B, T, C, s * Vs, Vs, pos0);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
        wk::embedding_backward_shard(dwte_shards.data() + s * Vs * C, dout.data(), e.tokens.data(),
                                     B, T, C, s * Vs, Vs);
    }
    EXPECT_EQ(sum, whole);
    EXPECT_EQ(std::vector<float>(dwte_shards.begin(), dwte_shards.begin() + e.V * C), dwte);
    for (size_t i = size_t(e.V * C); i < dwte_shards.size(); ++i) ASSERT_EQ(dwte_shards[i], 0.0f);
}

// The row-parallel bias and the residual, added to summed partial products: (out + b) + r.
TEST_P(Elementwise, AddBiasResidualAddsTheBiasToEveryRow) {
    const int64_t N = 37, C = 45;
    const auto out0 = random_vector(N * C, 1), bias = random_vector(C, 2),
               resid = random_vector(N * C, 3);
    std::vector<float> out = out0;
    wk::add_bias_residual(out.data(), bias.data(), resid.data(), N, C);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            ASSERT_EQ(out[n * C + c], (out0[n * C + c] + bias[c]) + resid[n * C + c]);
}

TEST_P(Elementwise, SumSquaresMatchesReference) {
    for (int64_t n : {0, 1, 15, 17, 1000 + 5, 5 * 16384 + 13}) {
        const auto x = random_vector(n, 7, 3.0f);
        double ref = 0;
        for (float v : x) ref += double(v) * v;
        const double got = wk::sum_squares(x.data(), n);
        // Exact squares in double; only the summation order differs.
        EXPECT_NEAR(got, ref, 1e-12 * ref + 1e-30) << n;
    }
}

// Chunks are summed in a fixed order, so the thread count changes nothing.
TEST_P(Elementwise, SumSquaresIndependentOfThreadCount) {
    const int64_t n = 7 * 16384 + 3;
    const auto x = random_vector(n, 8);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = wk::sum_squares(x.data(), n);
    omp_set_num_threads(3);
    const double three = wk::sum_squares(x.data(), n);
    omp_set_num_threads(threads);
    EXPECT_EQ(one, three);
    EXPECT_EQ(one, wk::sum_squares(x.data(), n));
}

INSTANTIATE_TEST_SUITE_P(Isa, Elementwise, ::testing::Values(wk::Isa::portable, wk::Isa::avx512),
                         [](const auto& info) {
                             return info.param == wk::Isa::avx512 ? "avx512" : "portable";
                         });

}  // namespace
