// The vocabulary-parallel classifier phases against the fused kernel: the vocabulary is cut into
// P shards, the phases run per shard, and the ranks' all-reduces are done here by hand between
// them, as the model does with its TpComm. The wte rows past the real vocabulary are NaN, so a
// shard that read its padding would poison the results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/classifier_parallel.hpp"
#include "weft/kernels/isa.hpp"

namespace weft::kernels {
namespace {

using test::random_vector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = -777.0f;

struct Problem {
    int64_t N, C, V, Vs;        // Vs: rows of each of the P shards (P * Vs >= V)
    std::vector<float> x, wte;  // wte: [P * Vs, C], NaN past row V
    std::vector<int32_t> targets;
    float scale;
};

Problem make_problem(int64_t N, int64_t C, int64_t V, int P, float wte_scale, uint64_t seed) {
    const int64_t Vs = (V + P - 1) / P + 3;  // some padding on the last shards
    Problem p{N, C, V, Vs, random_vector(size_t(N * C), seed), {}, {}, 0.0f};
    p.wte = random_vector(size_t(P * Vs * C), seed + 1, wte_scale);
    std::fill(p.wte.begin() + V * C, p.wte.end(), kNaN);
    int64_t valid = 0;
    for (int64_t n = 0; n < N; ++n) {
        int32_t t = int32_t((n * 7919 + seed) % uint64_t(V));
        if (n % 5 == 3) t = -1;  // ignored
        valid += t >= 0;
        p.targets.push_back(t);
    }
    p.scale = 1.0f / float(std::max<int64_t>(valid, 1));
    return p;
}

struct Result {
    std::vector<float> loss, dx, dwte;
};

std::vector<float> initial_dwte(const Problem& p, int P) {
    std::vector<float> d(size_t(P * p.Vs * p.C), kSentinel);  // padding rows: never written
    auto init = random_vector(size_t(p.V * p.C), 99, 0.01f);
    std::copy(init.begin(), init.end(), d.begin());
    return d;
}

Result fused(const Problem& p, int P, bool grad) {
    Result r{std::vector<float>(size_t(p.N), kNaN), std::vector<float>(size_t(p.N * p.C), kNaN),
             initial_dwte(p, P)};
    classifier_forward_backward(r.loss.data(), grad ? r.dx.data() : nullptr,
                                grad ? r.dwte.data() : nullptr, p.x.data(), p.wte.data(),
                                p.targets.data(), p.N, p.C, p.V, p.scale);
    return r;
}

// The phases on P shards, in chunks, with the all-reduces done here (in shard order).
Result sharded(const Problem& p, int P, bool grad) {
    const int64_t N = p.N, C = p.C, R = classifier_chunk_rows(N);
    Result r{std::vector<float>(size_t(N), kNaN), std::vector<float>(size_t(N * C), 0.0f),
             initial_dwte(p, P)};
    struct Shard {
        int64_t v0, vr;
        std::vector<float> logits, max, sums, loss, dx;
    };
    std::vector<Shard> shards;
    for (int s = 0; s < P; ++s) {
        const int64_t v0 = s * p.Vs, vr = std::clamp<int64_t>(p.V - v0, 0, p.Vs);
        shards.push_back({v0, vr, std::vector<float>(size_t(std::max<int64_t>(1, R * vr))),
                          std::vector<float>(size_t(R)), std::vector<float>(size_t(2 * R)),
                          std::vector<float>(size_t(R)), std::vector<float>(size_t(R * C))});
    }
    for (int64_t n0 = 0; n0 < N; n0 += R) {
        const int64_t rows = std::min(R, N - n0);
        const float* x = p.x.data() + n0 * C;
        const int32_t* t = p.targets.data() + n0;
        for (Shard& s : shards)
            classifier_shard_logits(s.logits.data(), s.max.data(), x, p.wte.data() + s.v0 * C, rows,
                                    C, s.vr);
        for (int64_t i = 0; i < rows; ++i) {
            float m = shards[0].max[size_t(i)];
            for (Shard& s : shards) m = std::max(m, s.max[size_t(i)]);
            for (Shard& s : shards) s.max[size_t(i)] = m;
        }
        for (Shard& s : shards)
            classifier_shard_sums(s.sums.data(), s.logits.data(), s.max.data(), t, rows, s.vr, s.v0,
                                  grad);
        for (int64_t i = 0; i < 2 * rows; ++i) {
            float sum = 0.0f;
            for (Shard& s : shards) sum += s.sums[size_t(i)];
            for (Shard& s : shards) s.sums[size_t(i)] = sum;
        }
        for (Shard& s : shards) {
            classifier_shard_finish(s.loss.data(), grad ? s.dx.data() : nullptr,
                                    grad ? r.dwte.data() + s.v0 * C : nullptr, s.logits.data(),
                                    s.max.data(), s.sums.data(), x, p.wte.data() + s.v0 * C, t,
                                    rows, C, s.vr, s.v0, p.scale);
            for (int64_t i = 0; i < rows; ++i) {
                // Every shard computes every row's loss from the summed statistics.
                EXPECT_EQ(s.loss[size_t(i)], shards[0].loss[size_t(i)]) << "row " << n0 + i;
                r.loss[size_t(n0 + i)] = s.loss[size_t(i)];
            }
            if (!grad) continue;
            for (int64_t i = 0; i < rows * C; ++i) r.dx[size_t(n0 * C + i)] += s.dx[size_t(i)];
        }
    }
    return r;
}

double max_abs(const std::vector<float>& v, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::abs(v[i])));
    return m;
}

// One shard is the fused kernel's computation in the same order: the same bits. Over several,
// the statistics are sums of the shards' partial sums: losses to 1e-5 relative, gradients to
// 1e-5 of their largest magnitude.
void expect_matches_fused(const Problem& p, int P, bool grad) {
    SCOPED_TRACE(::testing::Message() << "P=" << P << (grad ? " with gradient" : " loss only"));
    const Result want = fused(p, P, grad), got = sharded(p, P, grad);
    for (int64_t n = 0; n < p.N; ++n) {
        if (P == 1) {
            ASSERT_EQ(got.loss[n], want.loss[n]) << "row " << n;
        } else {
            ASSERT_NEAR(got.loss[n], want.loss[n], 1e-5 * std::max(1.0f, want.loss[n]))
                << "row " << n;
        }
        if (p.targets[n] < 0) {
            ASSERT_EQ(got.loss[n], 0.0f);
        }
    }
    if (!grad) return;
    const size_t real = size_t(p.V * p.C);
    const double dx_tol = P == 1 ? 0 : 1e-5 * max_abs(want.dx, want.dx.size());
    const double dw_tol = P == 1 ? 0 : 1e-5 * max_abs(want.dwte, real);
    EXPECT_LE(test::max_abs_diff(got.dx.data(), want.dx.data(), want.dx.size()), dx_tol);
    EXPECT_LE(test::max_abs_diff(got.dwte.data(), want.dwte.data(), real), dw_tol);
    for (size_t i = real; i < got.dwte.size(); ++i)
        ASSERT_EQ(got.dwte[i], kSentinel) << "padding row of dwte written";
    for (int64_t n = 0; n < p.N; ++n) {
        if (p.targets[n] >= 0) continue;
        for (int64_t c = 0; c < p.C; ++c) ASSERT_EQ(got.dx[size_t(n * p.C + c)], 0.0f);
    }
}

class ClassifierParallel : public test::IsaTest {};

TEST_P(ClassifierParallel, MatchesTheFusedKernelAcrossChunksAndShards) {
    // 2101 rows make three chunks; V = 257 leaves vector tails on every shard.
    for (int P : {1, 2, 3, 4}) {
        Problem p = make_problem(2101, 24, 257, P, 0.3f, 1);
        expect_matches_fused(p, P, true);
        expect_matches_fused(p, P, false);
    }
}

TEST_P(ClassifierParallel, ShardsOfPaddingOnlyTakeNoPart) {
    // V = 10 over 4 shards of 6 rows: 6 real, 4 real, then two shards of padding only.
    Problem p = make_problem(37, 8, 10, 4, 0.5f, 2);
    ASSERT_EQ(p.Vs, 6);
    expect_matches_fused(p, 4, true);
}

TEST_P(ClassifierParallel, LargeLogitsStayFinite) {
    // Logits with a spread of hundreds: most softmax terms underflow, on every shard.
    Problem p = make_problem(40, 16, 300, 3, 30.0f, 7);
    expect_matches_fused(p, 3, true);
    const Result got = sharded(p, 3, true);
    for (float l : got.loss) ASSERT_TRUE(std::isfinite(l));
}

INSTANTIATE_TEST_SUITE_P(Isa, ClassifierParallel, ::testing::Values(Isa::portable, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) {
                             return std::string(i.param == Isa::avx512 ? "avx512" : "portable");
                         });

TEST(ClassifierParallelScratch, OneChunkOfTheShardsLogitsAndItsStatistics) {
    EXPECT_EQ(classifier_shard_scratch_floats(0, 25216), 0);
    EXPECT_EQ(classifier_shard_scratch_floats(100, 25216), 100 * 25216 + 300);
    EXPECT_EQ(classifier_shard_scratch_floats(4096, 0), 3 * classifier_chunk_rows(4096));
}

}  // namespace
}  // namespace weft::kernels
