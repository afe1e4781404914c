// The fused output head + cross-entropy against a naive full-softmax reference in double, and
// against finite differences of its own loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/check.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/softmax_rows.hpp"

namespace weft::kernels {
namespace {

using test::max_abs_diff;
using test::random_vector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kPadRows = 7;  // wte has V + kPadRows rows; the padding is NaN

struct Problem {
    int64_t N, C, V;
    std::vector<float> x, wte;  // wte: [V + kPadRows, C]
    std::vector<int32_t> targets;
    float scale;
};

Problem make_problem(int64_t N, int64_t C, int64_t V, float wte_scale, uint64_t seed,
                     bool with_ignored) {
    Problem p{N, C, V, random_vector(size_t(N * C), seed), {}, {}, 1.0f};
    p.wte = random_vector(size_t((V + kPadRows) * C), seed + 1, wte_scale);
    std::fill(p.wte.begin() + V * C, p.wte.end(), kNaN);
    auto u = random_vector(size_t(N), seed + 2);
    int64_t valid = 0;
    for (int64_t n = 0; n < N; ++n) {
        int32_t t = int32_t((n * 7919 + seed) % uint64_t(V));
        if (with_ignored && (n % 5 == 3)) t = -1;
        if (t >= 0) ++valid;
        p.targets.push_back(t);
    }
    p.scale = 1.0f / float(std::max<int64_t>(valid, 1));
    return p;
}

struct Result {
    std::vector<float> loss, dx, dwte;
};

Result reference(const Problem& p) {
    const int64_t N = p.N, C = p.C, V = p.V;
    Result r{std::vector<float>(size_t(N)), std::vector<float>(size_t(N * C)),
             std::vector<float>(size_t(V * C))};
    std::vector<double> dwte(static_cast<size_t>(V * C), 0.0), logit(static_cast<size_t>(V));
    for (int64_t n = 0; n < N; ++n) {
        const int32_t t = p.targets[n];
        if (t < 0) continue;  // loss, dx stay 0
        double max = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
            double acc = 0;
            for (int64_t c = 0; c < C; ++c) acc += double(p.x[n * C + c]) * p.wte[v * C + c];
            logit[v] = acc;
            max = std::max(max, acc);
        }
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(logit[v] - max);
        r.loss[n] = float(std::log(sum) + max - logit[t]);
        for (int64_t v = 0; v < V; ++v) {
            double g = p.scale * (std::exp(logit[v] - max) / sum - (v == t ? 1.0 : 0.0));
            for (int64_t c = 0; c < C; ++c) {
                r.dx[n * C + c] += float(g * p.wte[v * C + c]);
                dwte[v * C + c] += g * p.x[n * C + c];
            }
        }
    }
    for (size_t i = 0; i < dwte.size(); ++i) r.dwte[i] = float(dwte[i]);
    return r;
}

// dwte starts from `initial` on the real rows (to check accumulation) and a sentinel on the
// padding rows (to check they are never written).
constexpr float kSentinel = -777.0f;

Result run(const Problem& p, const std::vector<float>& initial_dwte) {
    Result r{std::vector<float>(size_t(p.N), kNaN), std::vector<float>(size_t(p.N * p.C), kNaN),
             std::vector<float>(size_t((p.V + kPadRows) * p.C), kSentinel)};
    std::copy(initial_dwte.begin(), initial_dwte.end(), r.dwte.begin());
    classifier_forward_backward(r.loss.data(), r.dx.data(), r.dwte.data(), p.x.data(), p.wte.data(),
                                p.targets.data(), p.N, p.C, p.V, p.scale);
    return r;
}

double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float f : v) m = std::max(m, double(std::abs(f)));
    return m;
}

// Runs the body for each instruction-set path, restoring the default afterwards.
template <typename F>
void for_each_isa(F&& body) {
    const Isa initial = kernel_isa();
    for (Isa isa : {Isa::portable, Isa::avx512}) {
        if (isa == Isa::avx512 && !avx512_compiled()) continue;
        set_kernel_isa(isa);
        SCOPED_TRACE(isa == Isa::avx512 ? "avx512" : "portable");
        body();
    }
    set_kernel_isa(initial);
}

// Tolerances: fp32 logits and GEMMs against a double reference. Losses are O(log V) and agree
// to 2e-5 relative; gradients to 1e-4 of their largest magnitude.
constexpr double kLossTol = 2e-5;
constexpr double kGradTol = 1e-4;

void expect_matches_reference(const Problem& p) {
    auto initial = random_vector(size_t(p.V * p.C), 99, 0.01f);
    Result want = reference(p);
    for (size_t i = 0; i < initial.size(); ++i) want.dwte[i] += initial[i];
    Result got = run(p, initial);
    for (int64_t n = 0; n < p.N; ++n)
        ASSERT_NEAR(got.loss[n], want.loss[n], kLossTol * std::max(1.0f, want.loss[n]))
            << "row " << n;
    EXPECT_LE(max_abs_diff(got.dx.data(), want.dx.data(), want.dx.size()),
              kGradTol * max_abs(want.dx));
    EXPECT_LE(max_abs_diff(got.dwte.data(), want.dwte.data(), want.dwte.size()),
              kGradTol * max_abs(want.dwte));
    for (size_t i = size_t(p.V * p.C); i < got.dwte.size(); ++i)
        ASSERT_EQ(got.dwte[i], kSentinel) << "padding row of dwte written";
    for (int64_t n = 0; n < p.N; ++n)
        if (p.targets[n] < 0) {
            EXPECT_EQ(got.loss[n], 0.0f);
            for (int64_t c = 0; c < p.C; ++c) ASSERT_EQ(got.dx[n * p.C + c], 0.0f);
        }
}

TEST(Classifier, MatchesReferenceAcrossChunksWithIgnoredTargets) {
    // 2101 rows make several chunks (at most 1024 rows each), the last one shorter; V = 257
    // leaves a one-element vector tail.
    Problem p = make_problem(2101, 24, 257, 0.3f, 1, true);
    for_each_isa([&] { expect_matches_reference(p); });
}

// With bf16 products the kernel rounds the logits' gradient as its row loop writes it, transposed
// ([V, N], in blocks of 32 rows: 37 rows leave a tail block; 96 rows are whole blocks on whole
// cache lines, which take the streaming stores; V = 101 leaves a tail of columns), and packs its
// pinned operands once: the same bits as the plain pipeline of separate bf16 products on an fp32
// softmax gradient stored transposed, which the products then round.
TEST(Classifier, Bf16GivesThePlainPipelinesBits) {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    for (const int64_t rows : {37, 96})
        for_each_isa([rows] {
            SCOPED_TRACE(rows);
            const Problem p = make_problem(rows, 24, 101, 0.5f, 11, true);
            const int64_t N = p.N, C = p.C, V = p.V;
            const auto initial = random_vector(size_t(V * C), 98, 0.01f);
            const Result got = run(p, initial);

            std::vector<float> logits(size_t(N * V)), dx(size_t(N * C)), dwte = initial;
            gemm(false, true, N, V, C, 1.0f, p.x.data(), C, p.wte.data(), C, 0.0f, logits.data(),
                 V);
            const detail::SoftmaxRowOps ops = detail::softmax_row_ops();
            for (int64_t n = 0; n < N; ++n) {
                float* row = logits.data() + n * V;
                const int32_t t = p.targets[n];
                if (t < 0) {
                    std::fill(row, row + V, 0.0f);
                    continue;
                }
                const float sum = ops.exp_sum(row, V, ops.max(row, V), true);
                ops.scale(row, V, p.scale / sum);
                row[t] -= p.scale;
            }
            std::vector<float> grad_t(logits.size());
            for (int64_t n = 0; n < N; ++n)
                for (int64_t v = 0; v < V; ++v)
                    grad_t[size_t(v * N + n)] = logits[size_t(n * V + v)];
            gemm(true, false, N, C, V, 1.0f, grad_t.data(), N, p.wte.data(), C, 0.0f, dx.data(), C);
            gemm(false, false, V, C, N, 1.0f, grad_t.data(), N, p.x.data(), C, 1.0f, dwte.data(),
                 C);
            EXPECT_EQ(std::vector<float>(got.dx.begin(), got.dx.end()), dx);
            EXPECT_EQ(std::vector<float>(got.dwte.begin(), got.dwte.begin() + V * C), dwte);
        });
}

TEST(Classifier, VocabularySizesAroundTheVectorWidth) {
    for (int64_t V : {1, 15, 16, 31, 33, 100}) {
        SCOPED_TRACE(::testing::Message() << "V=" << V);
        Problem p = make_problem(19, 8, V, 0.5f, uint64_t(V), false);
        for_each_isa([&] { expect_matches_reference(p); });
    }
}

TEST(Classifier, LargeLogitsStayFinite) {
    // Logits with a spread of hundreds: most softmax terms underflow.
    Problem p = make_problem(40, 16, 300, 30.0f, 7, true);
    for_each_isa([&] { expect_matches_reference(p); });
}

TEST(Classifier, LossOnlyMatchesFusedLoss) {
    Problem p = make_problem(50, 12, 97, 0.5f, 3, true);
    for_each_isa([&] {
        std::vector<float> loss(size_t(p.N), kNaN);
        classifier_forward_backward(loss.data(), nullptr, nullptr, p.x.data(), p.wte.data(),
                                    p.targets.data(), p.N, p.C, p.V, p.scale);
        Result fused = run(p, std::vector<float>(size_t(p.V * p.C), 0.0f));
        for (int64_t n = 0; n < p.N; ++n) EXPECT_EQ(loss[n], fused.loss[n]);
    });
}

TEST(Classifier, GradientsMatchFiniteDifferences) {
    Problem p = make_problem(6, 8, 37, 0.5f, 5, true);
    for_each_isa([&] {
        Result got = run(p, std::vector<float>(size_t(p.V * p.C), 0.0f));
        // L = scale * Σ loss, from the kernel itself, summed in double.
        auto L = [&] {
            std::vector<float> loss(size_t(p.N));
            classifier_forward_backward(loss.data(), nullptr, nullptr, p.x.data(), p.wte.data(),
                                        p.targets.data(), p.N, p.C, p.V, p.scale);
            double s = 0;
            for (float l : loss) s += double(p.scale) * l;
            return s;
        };
        std::vector<size_t> xi, wi;
        for (size_t i = 0; i < p.x.size(); i += 5) xi.push_back(i);
        for (size_t i = 0; i < size_t(p.V * p.C); i += 11) wi.push_back(i);
        auto fd_x = test::finite_difference(p.x, L, xi);
        auto fd_w = test::finite_difference(p.wte, L, wi);
        // Central differences with h = 1e-2 on a float loss: O(h²) truncation plus ~1e-6/h
        // rounding, so agreement to 1e-3 absolute on gradients of size ~0.1.
        for (size_t j = 0; j < xi.size(); ++j)
            EXPECT_NEAR(got.dx[xi[j]], fd_x[j], 1e-3) << "dx[" << xi[j] << "]";
        for (size_t j = 0; j < wi.size(); ++j)
            EXPECT_NEAR(got.dwte[wi[j]], fd_w[j], 1e-3) << "dwte[" << wi[j] << "]";
    });
}

TEST(Classifier, LogitsMatchReferenceAndIgnorePadding) {
    Problem p = make_problem(13, 20, 45, 1.0f, 11, false);
    std::vector<float> logits(size_t(p.N * p.V), kNaN);
    classifier_logits(logits.data(), p.x.data(), p.wte.data(), p.N, p.C, p.V);
    std::vector<float> want(logits.size());
    for (int64_t n = 0; n < p.N; ++n)
        for (int64_t v = 0; v < p.V; ++v) {
            double acc = 0;
            for (int64_t c = 0; c < p.C; ++c) acc += double(p.x[n * p.C + c]) * p.wte[v * p.C + c];
            want[n * p.V + v] = float(acc);
        }
    EXPECT_LT(test::max_rel_diff(logits.data(), want.data(), want.size(), 1.0), 1e-5);
}

TEST(Classifier, RejectsTargetsOutsideTheVocabulary) {
    Problem p = make_problem(4, 4, 10, 1.0f, 2, false);
    p.targets[2] = 10;
    std::vector<float> loss(4);
    EXPECT_THROW(classifier_forward_backward(loss.data(), nullptr, nullptr, p.x.data(),
                                             p.wte.data(), p.targets.data(), p.N, p.C, p.V, 1.0f),
                 Error);
}

TEST(Classifier, ScratchIsOneChunkOfLogits) {
    EXPECT_EQ(classifier_scratch_floats(0, 50257), 0);
    EXPECT_EQ(classifier_scratch_floats(100, 50257), 100 * 50257);
    int64_t big = classifier_scratch_floats(4096, 50257);
    EXPECT_GT(big, 0);
    EXPECT_LE(big, 4096 * 50257);
    EXPECT_EQ(big % 50257, 0);
}

// Serving's log-probability of a token: the float loops against a double reference, on every
// path, over a vocabulary that is no multiple of the vector width. The portable path's one
// running sum of 50257 terms drifts most: 3.6e-5 here (AVX-512's 32 sums: under 2e-5).
TEST(LogSoftmaxAt, MatchesDoubleReference) {
    const int64_t V = 50257;
    std::vector<float> row = random_vector(size_t(V), 17, 5.0f);
    double top = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float x : row) sum += std::exp(double(x) - top);
    for (Isa isa : {Isa::avx512, Isa::portable}) {
        if (!isa_available(isa)) continue;
        set_kernel_isa(isa);
        for (int64_t t : {int64_t(0), int64_t(1234), V - 1})
            EXPECT_NEAR(log_softmax_at(row.data(), V, t),
                        double(row[size_t(t)]) - top - std::log(sum), 1e-4)
                << isa_name(isa) << " t " << t;
    }
    set_kernel_isa(default_isa());
}

// Greedy decoding's choice: std::max_element's index on every path, the largest value placed
// in a vector's body, its tail, and twice (the first wins), beside -inf.
TEST(Argmax, FirstLargestAsMaxElement) {
    for (int64_t V : {1, 15, 16, 17, 100, 49152, 50257}) {
        std::vector<float> row = random_vector(size_t(V), uint32_t(V), 5.0f);
        row[0] = -std::numeric_limits<float>::infinity();
        for (int64_t at : {V - 1, V / 2, int64_t(0)}) {
            std::vector<float> r = row;
            r[size_t(at)] = 100.0f;
            r[size_t((at + V / 3) % V)] = 100.0f;  // a tie after or before it
            const int64_t want = std::max_element(r.begin(), r.end()) - r.begin();
            for (Isa isa : {Isa::avx512, Isa::portable}) {
                if (!isa_available(isa)) continue;
                set_kernel_isa(isa);
                EXPECT_EQ(argmax(r.data(), V), want) << isa_name(isa) << " V " << V << " at " << at;
            }
            set_kernel_isa(default_isa());
        }
    }
}

// A request's top log-probabilities: log_softmax_terms gives log_softmax_at's bits for every
// token, and top_indices the n largest, ties to the lower index, as a stable sort of the indices
// by value would: n = 0, 1, a few, and the whole row; ties placed across the row.
TEST(TopLogprobs, TermsAndIndicesAsTheReference) {
    for (int64_t V : {1, 17, 1000, 4099}) {
        std::vector<float> row = random_vector(size_t(V), uint32_t(V) + 7, 5.0f);
        for (int64_t i = 0; i < V; i += 7) row[size_t(i)] = row[size_t(V / 2)];  // ties
        std::vector<int32_t> order(static_cast<size_t>(V));
        for (int64_t i = 0; i < V; ++i) order[size_t(i)] = int32_t(i);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
        for (int64_t n :
             {int64_t(0), int64_t(1), std::min<int64_t>(V, 5), std::min<int64_t>(V, 20), V}) {
            std::vector<int32_t> got(static_cast<size_t>(n));
            top_indices(row.data(), V, n, got.data());
            EXPECT_TRUE(std::equal(got.begin(), got.end(), order.begin()))
                << "V " << V << " n " << n;
        }
        for (Isa isa : {Isa::avx512, Isa::portable}) {
            if (!isa_available(isa)) continue;
            set_kernel_isa(isa);
            const LogSoftmaxRow terms = log_softmax_terms(row.data(), V);
            for (int64_t t = 0; t < V; t += std::max<int64_t>(1, V / 97)) {
                const float a = terms.at(row[size_t(t)]), b = log_softmax_at(row.data(), V, t);
                EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0)
                    << isa_name(isa) << " V " << V << " t " << t;
            }
        }
        set_kernel_isa(default_isa());
    }
    EXPECT_THROW(top_indices(nullptr, 3, 4, nullptr), Error);
}

}  // namespace
}  // namespace weft::kernels
