#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/layernorm.hpp"

namespace wk = weft::kernels;
using weft::test::max_rel_diff;
using weft::test::random_vector;

namespace {

struct Reference {
    std::vector<float> out, mean, rstd, dinp, dweight, dbias;
};

// Naive double-precision forward and backward (llm.c's formulas), dinp/dweight/dbias from zero.
Reference reference(const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& b, const std::vector<float>& dy, int64_t N,
                    int64_t C) {
    Reference r{std::vector<float>(N * C), std::vector<float>(N), std::vector<float>(N),
                std::vector<float>(N * C), std::vector<float>(C), std::vector<float>(C)};
    std::vector<double> dw(C, 0.0), db(C, 0.0);
    for (int64_t i = 0; i < N; ++i) {
        const float* xi = x.data() + i * C;
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; ++c) m += xi[c];
        m /= C;
        for (int64_t c = 0; c < C; ++c) v += (xi[c] - m) * (xi[c] - m);
        const double s = 1.0 / std::sqrt(v / C + 1e-5);
        r.mean[i] = float(m);
        r.rstd[i] = float(s);
        double dn_mean = 0, dnn_mean = 0;
        for (int64_t c = 0; c < C; ++c) {
            const double n = (xi[c] - m) * s, g = dy[i * C + c];
            r.out[i * C + c] = float(n * w[c] + b[c]);
            dn_mean += w[c] * g;
            dnn_mean += w[c] * g * n;
            dw[c] += n * g;
            db[c] += g;
        }
        dn_mean /= C;
        dnn_mean /= C;
        for (int64_t c = 0; c < C; ++c) {
            const double n = (xi[c] - m) * s, dn = w[c] * double(dy[i * C + c]);
            r.dinp[i * C + c] = float((dn - dn_mean - n * dnn_mean) * s);
        }
    }
    for (int64_t c = 0; c < C; ++c) r.dweight[c] = float(dw[c]), r.dbias[c] = float(db[c]);
    return r;
}

class LayerNorm : public weft::test::IsaTest {};

// Sizes: tails of 1 and 15 lanes, a single short row, and one large enough to run threaded.
TEST_P(LayerNorm, MatchesDoubleReference) {
    for (auto [N, C] :
         {std::pair<int64_t, int64_t>{5, 17}, {3, 47}, {1, 7}, {64, 768}, {37, 1001}}) {
        // An offset mean checks that the variance is not computed as E[x²] - E[x]².
        std::vector<float> x = random_vector(N * C, 1, 2.0f);
        for (float& e : x) e += 3.0f;
        const auto w = random_vector(C, 2), b = random_vector(C, 3), dy = random_vector(N * C, 4);
        const Reference r = reference(x, w, b, dy, N, C);

        std::vector<float> out(N * C), mean(N), rstd(N);
        wk::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                              C);
        // fp32 statistics: 1e-4 relative above an absolute floor of 1e-2 (out = n·w + b cancels).
        EXPECT_LT(max_rel_diff(out.data(), r.out.data(), N * C, 1e-2), 1e-4) << N << "x" << C;
        EXPECT_LT(max_rel_diff(mean.data(), r.mean.data(), N), 1e-5);
        EXPECT_LT(max_rel_diff(rstd.data(), r.rstd.data(), N), 1e-5);

        // Pre-filled gradients: backward must add to all three, not overwrite them.
        const auto dinp0 = random_vector(N * C, 5), dw0 = random_vector(C, 6),
                   db0 = random_vector(C, 7);
        std::vector<float> dinp = dinp0, dw = dw0, db = db0;
        wk::layernorm_backward(dinp.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), N, C);
        for (int64_t i = 0; i < N * C; ++i) dinp[i] -= dinp0[i];
        for (int64_t c = 0; c < C; ++c) dw[c] -= dw0[c], db[c] -= db0[c];
        // Gradients sum many terms in fp32; 1e-3 relative above an absolute floor of 1e-2.
        EXPECT_LT(max_rel_diff(dinp.data(), r.dinp.data(), N * C, 1e-2), 1e-3) << N << "x" << C;
        EXPECT_LT(max_rel_diff(dw.data(), r.dweight.data(), C, 1e-2), 1e-3) << N << "x" << C;
        EXPECT_LT(max_rel_diff(db.data(), r.dbias.data(), C, 1e-2), 1e-3) << N << "x" << C;
    }
}

// L = Σ g ⊙ layernorm(x; w, b) with random g, so ∂L/∂out = g.
TEST_P(LayerNorm, BackwardMatchesFiniteDifferences) {
    const int64_t N = 3, C = 37;
    auto x = random_vector(N * C, 11), w = random_vector(C, 12), b = random_vector(C, 13);
    const auto g = random_vector(N * C, 14);
    std::vector<float> out(N * C), mean(N), rstd(N);
    auto loss = [&] {
        wk::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                              C);
        double l = 0;
        for (int64_t i = 0; i < N * C; ++i) l += double(g[i]) * out[i];
        return l;
    };
    loss();
    std::vector<float> dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    wk::layernorm_backward(dinp.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);

    std::vector<size_t> all_x(N * C), all_c(C);
    for (size_t i = 0; i < all_x.size(); ++i) all_x[i] = i;
    for (size_t i = 0; i < all_c.size(); ++i) all_c[i] = i;
    // h = 1e-2 in fp32: truncation O(h²) and rounding O(ε/h) both stay near 1e-4, so the check
    // is |fd - analytic| ≤ 2e-3 · (|analytic| + 0.1).
    auto expect_close = [](const std::vector<double>& fd, const std::vector<float>& an,
                           const char* what) {
        for (size_t i = 0; i < fd.size(); ++i)
            EXPECT_NEAR(fd[i], an[i], 2e-3 * (std::abs(an[i]) + 0.1)) << what << "[" << i << "]";
    };
    expect_close(weft::test::finite_difference(x, loss, all_x), dinp, "dinp");
    expect_close(weft::test::finite_difference(w, loss, all_c), dw, "dweight");
    expect_close(weft::test::finite_difference(b, loss, all_c), db, "dbias");
}

// dweight/dbias are reduced from per-thread partials in a fixed order: runs with the same thread
// count must agree bit for bit.
TEST_P(LayerNorm, BackwardIsDeterministic) {
    const int64_t N = 257, C = 768;
    const auto x = random_vector(N * C, 21), w = random_vector(C, 22), b = random_vector(C, 23);
    const auto dy = random_vector(N * C, 24);
    std::vector<float> out(N * C), mean(N), rstd(N);
    wk::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    std::vector<float> first;
    for (int run = 0; run < 3; ++run) {
        std::vector<float> dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
        wk::layernorm_backward(dinp.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), N, C);
        dw.insert(dw.end(), db.begin(), db.end());
        if (run == 0) first = dw;
        EXPECT_EQ(dw, first);
    }
}

TEST(LayerNormShape, RejectsEmptyRows) {
    float dummy = 0;
    EXPECT_THROW(wk::layernorm_forward(&dummy, &dummy, &dummy, &dummy, &dummy, &dummy, 1, 0),
                 weft::Error);
}

INSTANTIATE_TEST_SUITE_P(Isa, LayerNorm, ::testing::Values(wk::Isa::portable, wk::Isa::avx512),
                         [](const auto& info) {
                             return info.param == wk::Isa::avx512 ? "avx512" : "portable";
                         });

}  // namespace
