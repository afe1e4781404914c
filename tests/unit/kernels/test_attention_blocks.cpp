// The pieces of attention that context parallelism needs (docs/context_parallel.md), for every
// instruction-set path this CPU runs: attention of a query chunk against a block of keys at its own
// absolute positions (k_pos0), the merge of such blocks by their log-sum-exps, the backward of a
// block given the merged output, and the zigzag sharding that decides which blocks a ring step
// runs. Every result is checked against softmax attention computed in double precision over all
// keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/check.hpp"
#include "support/isa_test.hpp"
#include "weft/core/error.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/kernels/attention/zigzag.hpp"

namespace weft::kernels {
namespace {

using test::Reference;
using test::reference;
using test::to_double;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// max |a - b| relative to max |b| but never to less than 0.1 (as test_attention.cpp): a wrong
// mask or a lost block gives errors of order 1. Where b is -inf, a must be -inf exactly; a NaN
// anywhere is an infinite error.
double error(const std::vector<float>& a, const std::vector<double>& b) {
    double worst = 0, size = 0.1;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i])) return INFINITY;
        if (std::isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        worst = std::max(worst, std::abs(a[i] - b[i]));
        size = std::max(size, std::abs(b[i]));
    }
    if (std::getenv("WEFT_TEST_VERBOSE")) std::printf("  error %.3g of %.3g\n", worst, size);
    return worst / size;
}

// The merge alone, against the formula in double: weights that would overflow a naive
// exp(lse) (lse = ±100), and sides of equal weight. Within 2e-5 relative: a float lse near 100
// is rounded by up to 4e-6 (half an ulp), and that absolute error enters every weight exp(lse_i
// - lse) as a relative one (2.2e-6 seen here); a wrong weight is off by order 1.
TEST(AttentionMerge, MatchesTheFormulaInDouble) {
    const int64_t B = 1, T = 4, NH = 2, HS = 5, C = NH * HS;
    const MergeShape s{B, T, NH, HS, C, C};
    auto a = test::random_vector(B * T * C, 41), b = test::random_vector(B * T * C, 42);
    std::vector<float> la = {100.0f, -100.0f, 3.0f, 0.5f, 88.0f, 7.0f, -1.0f, 2.0f};
    std::vector<float> lb = {99.0f, -100.0f, -40.0f, 0.5f, 90.0f, 7.5f, 30.0f, -2.0f};
    std::vector<float> out = a, lse = la;
    attention_merge(out.data(), lse.data(), b.data(), lb.data(), s);
    std::vector<double> want(out.size()), want_lse(lse.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < NH; ++h) {
            const size_t l = size_t(h * T + t);
            const double L = std::log(std::exp(double(la[l])) + std::exp(double(lb[l])));
            want_lse[l] = L;
            for (int64_t d = 0; d < HS; ++d) {
                const size_t i = size_t(t * C + h * HS + d);
                want[i] = a[i] * std::exp(la[l] - L) + b[i] * std::exp(lb[l] - L);
            }
        }
    EXPECT_LT(error(out, want), 2e-5);
    EXPECT_LT(error(lse, want_lse), 2e-5);
}

TEST(AttentionMerge, MaskedSidesGiveNoNaN) {
    const int64_t HS = 3;
    const MergeShape s{1, 4, 1, HS, HS, HS};
    // Rows: running empty + part, running + empty part, both empty, running empty + empty part.
    std::vector<float> out = {NAN, NAN, NAN, 1, 2, 3, NAN, NAN, NAN, 4, 5, 6};
    std::vector<float> lse = {kNegInf, 0.25f, kNegInf, kNegInf};
    const std::vector<float> part = {7, 8, 9, NAN, NAN, NAN, NAN, NAN, NAN, 1, 1, 1};
    const std::vector<float> part_lse = {1.5f, kNegInf, kNegInf, kNegInf};
    attention_merge(out.data(), lse.data(), part.data(), part_lse.data(), s);
    EXPECT_EQ(out, (std::vector<float>{7, 8, 9, 1, 2, 3, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(lse, (std::vector<float>{1.5f, 0.25f, kNegInf, kNegInf}));
}

TEST(AttentionMerge, BadShapeIsAnError) {
    float x = 0;
    EXPECT_NE(test::error_of([&] {
                  attention_merge(&x, &x, &x, &x, {1, 1, 2, 8, 16, 15});
              }).find("ldo=16, ldp=15 must be at least NH*HS=16"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] {
                  attention_merge(&x, &x, &x, &x, {1, 1, 2, 0, 16, 16});
              }).find("HS=0"),
              std::string::npos);
}

// B sequences; Tq queries at absolute positions q_pos0.., Tk keys at k_pos0..; dense rows.
struct Problem {
    int64_t B, Tq, Tk, NH, NKV, HS, q_pos0, k_pos0 = 0;
    float scale = 1.0f;  // of q and k: larger makes the softmax peakier
};

std::string describe(const Problem& p) {
    return "B=" + std::to_string(p.B) + " Tq=" + std::to_string(p.Tq) +
           " Tk=" + std::to_string(p.Tk) + " NH=" + std::to_string(p.NH) +
           " NKV=" + std::to_string(p.NKV) + " HS=" + std::to_string(p.HS) +
           " q_pos0=" + std::to_string(p.q_pos0) + " k_pos0=" + std::to_string(p.k_pos0) +
           " scale=" + std::to_string(p.scale);
}

AttentionShape shape_of(const Problem& p) {
    AttentionShape s{p.B,         p.Tq,         p.Tk,        p.NH,     p.HS,
                     p.NH * p.HS, p.NKV * p.HS, p.NH * p.HS, p.q_pos0, p.NKV};
    s.k_pos0 = p.k_pos0;
    return s;
}

MergeShape merge_shape(const AttentionShape& s) {
    return {s.B, s.Tq, s.NH, s.HS, s.ldo, s.ldo};
}

// Rows [t0, t0 + n) of every sequence of x ([B][T][ld]), as a dense [B][n][ld]: a chunk of a
// sequence, as a ring step holds it.
std::vector<float> rows_of(const std::vector<float>& x, int64_t B, int64_t T, int64_t ld,
                           int64_t t0, int64_t n) {
    std::vector<float> y(B * n * ld);
    for (int64_t b = 0; b < B; ++b)
        std::copy_n(x.begin() + (b * T + t0) * ld, n * ld, y.begin() + b * n * ld);
    return y;
}

// The inverse: y ([B][n][ld]) added into rows [t0, t0 + n) of x ([B][T][ld]).
void add_rows_to(std::vector<float>& x, const std::vector<float>& y, int64_t B, int64_t T,
                 int64_t ld, int64_t t0, int64_t n) {
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n * ld; ++i) x[(b * T + t0) * ld + i] += y[b * n * ld + i];
}

// Cut points 0 = c_0 < c_1 < ... < c_blocks = Tk: blocks of random lengths.
std::vector<int64_t> random_cuts(int64_t Tk, int blocks, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::set<int64_t> cuts{0, Tk};
    while (int(cuts.size()) < blocks + 1) cuts.insert(1 + int64_t(rng() % uint64_t(Tk - 1)));
    return {cuts.begin(), cuts.end()};
}

struct Inputs {
    std::vector<float> q, k, v, dout;
};

Inputs inputs_of(const AttentionShape& s, float scale, uint64_t seed) {
    return {test::random_vector(s.B * s.Tq * s.ldq, seed, scale),
            test::random_vector(s.B * s.Tk * s.ldkv, seed + 1, scale),
            test::random_vector(s.B * s.Tk * s.ldkv, seed + 2),
            test::random_vector(s.B * s.Tq * s.ldo, seed + 3)};
}

// The keys of s (all its sequences) cut into blocks at `cuts`, each run as a block of its own and
// merged, in a shuffled order, into a running result that starts as lse = -inf and an output of
// NaN (never read); each block's own result is checked against the double reference if
// `check_blocks`. Gradients of the same split, if `grads`: the block backward of each block
// given the merged output and lse, dK and dV scattered back, dQ accumulated.
struct Split {
    std::vector<float> out, lse, dq, dk, dv;
};

Split run_split(const AttentionShape& s, const Inputs& x, const std::vector<int64_t>& cuts,
                bool check_blocks, bool grads, uint64_t seed) {
    Split r;
    r.out.assign(s.B * s.Tq * s.ldo, NAN);
    r.lse.assign(s.B * s.NH * s.Tq, kNegInf);
    std::vector<size_t> order(cuts.size() - 1);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    auto block = [&](size_t n) {
        AttentionShape bs = s;
        bs.Tk = cuts[n + 1] - cuts[n];
        bs.k_pos0 = s.k_pos0 + cuts[n];
        return bs;
    };
    for (size_t n : order) {
        const AttentionShape bs = block(n);
        const auto kb = rows_of(x.k, s.B, s.Tk, s.ldkv, cuts[n], bs.Tk);
        const auto vb = rows_of(x.v, s.B, s.Tk, s.ldkv, cuts[n], bs.Tk);
        std::vector<float> out(r.out.size(), 12345.0f), lse(r.lse.size(), 12345.0f);
        attention_forward(out.data(), lse.data(), x.q.data(), kb.data(), vb.data(), bs);
        attention_merge(r.out.data(), r.lse.data(), out.data(), lse.data(), merge_shape(s));
        if (!check_blocks) continue;
        // Each block is itself exact attention over its keys; queries before it get 0 and -inf.
        const Reference ref = reference(bs, to_double(x.q), to_double(kb), to_double(vb));
        EXPECT_LT(error(out, ref.out), 2e-5) << "block at key " << cuts[n];
        EXPECT_LT(error(lse, ref.lse), 2e-5) << "block at key " << cuts[n];
    }
    if (!grads) return r;
    r.dq.assign(x.q.size(), 0.0f);
    r.dk.assign(x.k.size(), 0.0f);
    r.dv.assign(x.v.size(), 0.0f);
    for (size_t n : order) {
        const AttentionShape bs = block(n);
        const auto kb = rows_of(x.k, s.B, s.Tk, s.ldkv, cuts[n], bs.Tk);
        const auto vb = rows_of(x.v, s.B, s.Tk, s.ldkv, cuts[n], bs.Tk);
        std::vector<float> dk(kb.size()), dv(vb.size());
        attention_backward(r.dq.data(), dk.data(), dv.data(), x.dout.data(), x.q.data(), kb.data(),
                           vb.data(), r.out.data(), r.lse.data(), bs);
        add_rows_to(r.dk, dk, s.B, s.Tk, s.ldkv, cuts[n], bs.Tk);
        add_rows_to(r.dv, dv, s.B, s.Tk, s.ldkv, cuts[n], bs.Tk);
    }
    return r;
}

class AttentionBlocksTest : public test::IsaTest {};

// Random splits of the keys into blocks, merged, against full attention in double: out and lse
// within 2e-5 of the largest value (float sums over a few hundred keys reach ~1e-5; a wrong
// offset or weight gives errors of order 1). Keys run past the last query, so the late blocks
// are fully masked, and blocks that start after some queries leave those rows empty.
void check_merge(const Problem& p, int blocks, uint64_t seed) {
    SCOPED_TRACE(describe(p) + " blocks=" + std::to_string(blocks));
    const AttentionShape s = shape_of(p);
    const Inputs x = inputs_of(s, p.scale, seed);
    const Reference full = reference(s, to_double(x.q), to_double(x.k), to_double(x.v));
    const Split r = run_split(s, x, random_cuts(p.Tk, blocks, seed), true, false, seed);
    EXPECT_LT(error(r.out, full.out), 2e-5) << "out";
    EXPECT_LT(error(r.lse, full.lse), 2e-5) << "lse";
}

TEST_P(AttentionBlocksTest, MergedBlocksMatchFullAttention) {
    check_merge({1, 70, 150, 4, 4, 24, 40}, 4, 1);   // keys 110.. masked for every query
    check_merge({1, 130, 130, 2, 2, 32, 0}, 3, 2);   // the whole causal sequence, ragged tiles
    check_merge({1, 100, 100, 2, 2, 32, 0}, 12, 3);  // many short blocks, most rows empty in some
    check_merge({1, 90, 120, 2, 2, 32, 20, 0, 4.0f}, 5, 4);  // a peaky softmax
}

TEST_P(AttentionBlocksTest, MergedBlocksGroupedQuery) {
    check_merge({2, 70, 150, 6, 2, 24, 40}, 4, 5);
    check_merge({1, 65, 100, 4, 1, 16, 10}, 6, 6);  // multi-query
}

// Keys at positions after some or all of the queries: empty rows are zeros and -inf exactly,
// and a block wholly after every query is all of that.
TEST_P(AttentionBlocksTest, RowsThatSeeNoKey) {
    for (const Problem& p :
         {Problem{2, 70, 40, 4, 2, 24, 0, 30}, Problem{1, 20, 64, 2, 2, 16, 5, 25},
          Problem{1, 1, 9, 1, 1, 8, 0, 1}}) {
        SCOPED_TRACE(describe(p));
        const AttentionShape s = shape_of(p);
        const Inputs x = inputs_of(s, 1.0f, 7);
        std::vector<float> out(s.B * s.Tq * s.ldo, NAN), lse(s.B * s.NH * s.Tq, NAN);
        attention_forward(out.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
        const Reference ref = reference(s, to_double(x.q), to_double(x.k), to_double(x.v));
        EXPECT_LT(error(out, ref.out), 2e-5);
        EXPECT_LT(error(lse, ref.lse), 2e-5);
        int64_t empty = 0;
        for (double l : ref.lse) empty += std::isinf(l);
        EXPECT_GT(empty, 0) << "the case should have rows that see no key";
    }
}

// The block backward over a split, given the merged output and lse, summed over blocks, against
// the double reference and the whole-sequence kernel: within 5e-5 of the largest gradient, as
// test_attention.cpp's gradients. Keys of fully masked blocks get exactly zero.
void check_block_backward(const Problem& p, int blocks, uint64_t seed) {
    SCOPED_TRACE(describe(p) + " blocks=" + std::to_string(blocks));
    const AttentionShape s = shape_of(p);
    const Inputs x = inputs_of(s, p.scale, seed);
    const Reference full =
        reference(s, to_double(x.q), to_double(x.k), to_double(x.v), to_double(x.dout));
    const Split r = run_split(s, x, random_cuts(p.Tk, blocks, seed), false, true, seed);
    EXPECT_LT(error(r.dq, full.dq), 5e-5) << "dq";
    EXPECT_LT(error(r.dk, full.dk), 5e-5) << "dk";
    EXPECT_LT(error(r.dv, full.dv), 5e-5) << "dv";

    std::vector<float> out(r.out.size()), lse(r.lse.size()), dq(x.q.size()), dk(x.k.size()),
        dv(x.v.size());
    attention_forward(out.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), s);
    attention_backward(dq.data(), dk.data(), dv.data(), x.dout.data(), x.q.data(), x.k.data(),
                       x.v.data(), out.data(), lse.data(), s);
    EXPECT_LT(error(r.dq, to_double(dq)), 5e-5) << "dq against the whole-sequence kernel";
    EXPECT_LT(error(r.dk, to_double(dk)), 5e-5) << "dk against the whole-sequence kernel";
    EXPECT_LT(error(r.dv, to_double(dv)), 5e-5) << "dv against the whole-sequence kernel";

    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t j = std::max<int64_t>(0, s.q_pos0 + s.Tq - s.k_pos0); j < s.Tk; ++j)
            for (int64_t c = 0; c < s.ldkv; ++c) {
                ASSERT_EQ(r.dk[(b * s.Tk + j) * s.ldkv + c], 0.0f) << "key " << j;
                ASSERT_EQ(r.dv[(b * s.Tk + j) * s.ldkv + c], 0.0f) << "key " << j;
            }
}

TEST_P(AttentionBlocksTest, BlockBackwardSumsToFullBackward) {
    check_block_backward({1, 70, 150, 4, 4, 24, 40}, 4, 11);
    check_block_backward({1, 130, 130, 2, 2, 32, 0}, 3, 12);
    check_block_backward({1, 100, 100, 2, 2, 32, 0}, 12, 13);
    check_block_backward({2, 70, 150, 6, 2, 24, 40}, 4, 14);  // grouped query
    check_block_backward({1, 65, 100, 4, 1, 16, 10}, 6, 15);  // multi-query
}

// L = Σ w ⊙ out, out the merged attention of the blocks at `cuts`: the kernel's block backward,
// summed, against central differences (h = 1e-3) of the double reference at every third element
// of q, k and v, within 2e-5 + 2e-4·|g|. Differences in double carry no float rounding; the
// worst disagreement seen on the portable path is under 1% of that tolerance, while a wrong mask
// is off by order 1.
void check_finite_differences(const Problem& p, const std::vector<int64_t>& cuts) {
    SCOPED_TRACE(describe(p));
    const AttentionShape s = shape_of(p);
    Inputs x = inputs_of(s, 1.0f, 21);
    const Split r = run_split(s, x, cuts, false, true, 21);
    std::vector<double> q = to_double(x.q), k = to_double(x.k), v = to_double(x.v);
    const std::vector<double> w = to_double(x.dout);
    auto loss = [&] {
        const Reference ref = reference(s, q, k, v);
        double L = 0;
        for (size_t i = 0; i < w.size(); ++i) L += w[i] * ref.out[i];
        return L;
    };
    const double h = 1e-3;
    double worst = 0;  // the largest share of the tolerance used
    for (auto [xs, g, name] :
         {std::tuple{&q, &r.dq, "q"}, std::tuple{&k, &r.dk, "k"}, std::tuple{&v, &r.dv, "v"}}) {
        for (size_t i = 0; i < xs->size(); i += 3) {  // 3 and HS = 8: every row, mixed lanes
            const double keep = (*xs)[i];
            (*xs)[i] = keep + h;
            const double up = loss();
            (*xs)[i] = keep - h;
            const double down = loss();
            (*xs)[i] = keep;
            const double fd = (up - down) / (2 * h);
            EXPECT_NEAR((*g)[i], fd, 2e-5 + 2e-4 * std::abs(fd)) << name << i;
            worst = std::max(worst, std::abs((*g)[i] - fd) / (2e-5 + 2e-4 * std::abs(fd)));
        }
    }
    if (std::getenv("WEFT_TEST_VERBOSE")) std::printf("  tolerance used %.3g\n", worst);
}

TEST_P(AttentionBlocksTest, FiniteDifferenceBlockGradient) {
    // One block at a key offset: queries at 2..10, keys at 6..17, so queries 2..5 see none.
    check_finite_differences({1, 9, 12, 4, 2, 8, 2, 6}, {0, 12});
    // Three blocks merged; the last (keys 15..19) lies after every query (6..14).
    check_finite_differences({1, 9, 20, 4, 2, 8, 6}, {0, 7, 15, 20});
}

TEST_P(AttentionBlocksTest, NegativeKeyPositionIsAnError) {
    std::vector<float> buf(4096);
    float* p = buf.data();
    AttentionShape s = shape_of({1, 4, 4, 2, 2, 8, 0});
    s.k_pos0 = -3;
    EXPECT_NE(test::error_of([&] {
                  attention_forward(p, p, p, p, p, s);
              }).find("q_pos0=0, k_pos0=-3 of the first query and key must not be negative"),
              std::string::npos);
    EXPECT_NE(
        test::error_of([&] { attention_backward(p, p, p, p, p, p, p, p, p, s); }).find("k_pos0=-3"),
        std::string::npos);
}

// The (query, key) pairs that c queries from position q0 and c keys from k0 leave visible,
// counted one by one: the brute force that zigzag_mask and zigzag_block_work must agree with.
int64_t visible_pairs(int64_t q0, int64_t k0, int64_t c) {
    int64_t n = 0;
    for (int64_t i = 0; i < c; ++i)
        for (int64_t j = 0; j < c; ++j) n += k0 + j <= q0 + i;
    return n;
}

TEST(Zigzag, EveryPositionOwnedOnce) {
    for (int64_t cp : {1, 2, 3, 4, 8})
        for (int64_t chunk : {1, 5, 16}) {
            const Zigzag z = zigzag(2 * cp * chunk, cp);
            std::vector<int> owners(size_t(z.T), 0);
            for (int64_t r = 0; r < cp; ++r) {
                const auto pos = zigzag_positions(z, r);
                ASSERT_EQ(int64_t(pos.size()), 2 * chunk);
                EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end())) << "rank " << r;
                for (int64_t t : pos) ++owners[size_t(t)];
            }
            for (int64_t t = 0; t < z.T; ++t)
                ASSERT_EQ(owners[size_t(t)], 1) << "position " << t << " cp=" << cp;
        }
}

// Each block's mask and work agree with brute force over its positions; every rank scores the
// same number of (query, key) pairs, together the T·(T+1)/2 of the causal sequence; a contiguous
// split of the same sequence is unbalanced (so the measure can tell).
TEST(Zigzag, BlocksAndCausalBalance) {
    for (int64_t cp : {2, 4}) {
        const Zigzag z = zigzag(2 * cp * 6, cp);
        std::vector<int64_t> work(size_t(cp), 0), contiguous(size_t(cp), 0);
        for (int64_t r = 0; r < cp; ++r)
            for (int64_t kv = 0; kv < cp; ++kv) {
                for (const ZigzagBlock& blk : zigzag_blocks(z, r, kv)) {
                    EXPECT_EQ(blk.q_pos0, zigzag_chunk(z, r, blk.q_part) * z.chunk);
                    EXPECT_EQ(blk.k_pos0, zigzag_chunk(z, kv, blk.k_part) * z.chunk);
                    const int64_t n = visible_pairs(blk.q_pos0, blk.k_pos0, z.chunk);
                    const BlockMask want = n == 0                   ? BlockMask::masked
                                           : n == z.chunk * z.chunk ? BlockMask::full
                                                                    : BlockMask::diagonal;
                    EXPECT_EQ(blk.mask, want) << "rank " << r << " kv " << kv;
                    EXPECT_EQ(zigzag_block_work(z, blk.mask), n);
                    work[size_t(r)] += n;
                }
                const int64_t len = z.T / cp;
                for (int64_t i = 0; i < len; ++i)
                    for (int64_t j = 0; j < len; ++j)
                        contiguous[size_t(r)] += kv * len + j <= r * len + i;
            }
        int64_t total = 0;
        for (int64_t r = 0; r < cp; ++r) {
            EXPECT_EQ(work[size_t(r)], work[0]) << "cp=" << cp << " rank " << r;
            total += work[size_t(r)];
        }
        EXPECT_EQ(total, z.T * (z.T + 1) / 2);
        EXPECT_GT(contiguous.back(), 2 * contiguous.front()) << "cp=" << cp;
    }
}

TEST(Zigzag, Errors) {
    EXPECT_NE(test::error_of([] {
                  zigzag(100, 3);
              }).find("sequence length T=100 must be a positive multiple of 2*cp=6 (cp=3)"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { zigzag(0, 2); }).find("T=0"), std::string::npos);
    EXPECT_NE(test::error_of([] { zigzag(8, 0); }).find("cp=0 must be at least 1"),
              std::string::npos);
    const Zigzag z = zigzag(16, 2);
    EXPECT_NE(test::error_of([&] { zigzag_positions(z, 2); }).find("rank 2 is not in 0..1 (cp=2)"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { zigzag_blocks(z, 0, -1); }).find("rank -1"), std::string::npos);
}

// A ring of cp ranks simulated in one process with zigzag sharding: every rank's two query
// chunks meet every rank's keys (in ring order, rank - step), masked blocks skipped, partials
// merged; backward accumulates each rank's dK and dV over every rank's queries, as the ring
// rotates them home. Against full attention in double, tolerances as above.
void check_zigzag_ring(int64_t cp, int64_t chunk, int64_t NH, int64_t NKV) {
    const Zigzag z = zigzag(2 * cp * chunk, cp);
    const Problem p{2, z.T, z.T, NH, NKV, 16, 0};
    SCOPED_TRACE(describe(p) + " cp=" + std::to_string(cp));
    const AttentionShape s = shape_of(p);
    const Inputs x = inputs_of(s, 1.0f, 31);
    const Reference full =
        reference(s, to_double(x.q), to_double(x.k), to_double(x.v), to_double(x.dout));
    const int64_t c = z.chunk, B = s.B, BH = s.B * s.NH;

    // One part (a chunk of every sequence) of one tensor of a rank.
    auto part = [&](const std::vector<float>& t, int64_t ld, int64_t rank, int pt) {
        return rows_of(t, B, z.T, ld, zigzag_chunk(z, rank, pt) * c, c);
    };
    struct Part {
        std::vector<float> out, lse, dq;
    };
    std::vector<Part> parts(size_t(2 * cp));  // rank * 2 + part
    std::vector<std::vector<float>> dk(size_t(2 * cp)), dv(size_t(2 * cp));
    for (auto& pt : parts)
        pt = {std::vector<float>(B * c * s.ldo, NAN), std::vector<float>(BH * c, kNegInf),
              std::vector<float>(B * c * s.ldq, 0.0f)};
    for (auto& d : dk) d.assign(B * c * s.ldkv, 0.0f);
    for (auto& d : dv) d.assign(B * c * s.ldkv, 0.0f);

    auto block_shape = [&](const ZigzagBlock& blk) {
        AttentionShape bs = s;
        bs.Tq = bs.Tk = c;
        bs.q_pos0 = blk.q_pos0;
        bs.k_pos0 = blk.k_pos0;
        return bs;
    };
    int64_t calls = 0;
    for (int pass = 0; pass < 2; ++pass)  // forward, then backward with the merged results
        for (int64_t rank = 0; rank < cp; ++rank)
            for (int64_t step = 0; step < cp; ++step) {
                const int64_t kv_rank = (rank - step + cp) % cp;
                for (const ZigzagBlock& blk : zigzag_blocks(z, rank, kv_rank)) {
                    if (blk.mask == BlockMask::masked) continue;
                    const AttentionShape bs = block_shape(blk);
                    const auto q = part(x.q, s.ldq, rank, blk.q_part);
                    const auto k = part(x.k, s.ldkv, kv_rank, blk.k_part);
                    const auto v = part(x.v, s.ldkv, kv_rank, blk.k_part);
                    Part& mine = parts[size_t(2 * rank + blk.q_part)];
                    if (pass == 0) {
                        std::vector<float> out(mine.out.size()), lse(mine.lse.size());
                        attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), bs);
                        attention_merge(mine.out.data(), mine.lse.data(), out.data(), lse.data(),
                                        merge_shape(bs));
                        ++calls;
                    } else {
                        const auto dout = part(x.dout, s.ldo, rank, blk.q_part);
                        const size_t kv = size_t(2 * kv_rank + blk.k_part);
                        attention_backward(mine.dq.data(), dk[kv].data(), dv[kv].data(),
                                           dout.data(), q.data(), k.data(), v.data(),
                                           mine.out.data(), mine.lse.data(), bs);
                    }
                }
            }
    // Of the 4·cp² chunk pairs, those with the key chunk not after the query chunk run.
    EXPECT_EQ(calls, cp * (2 * cp + 1));

    std::vector<float> out(full.out.size(), 0.0f), lse(full.lse.size(), 0.0f), dq(x.q.size(), 0.0f),
        dkf(x.k.size(), 0.0f), dvf(x.v.size(), 0.0f);
    for (int64_t rank = 0; rank < cp; ++rank)
        for (int pt = 0; pt < 2; ++pt) {
            const int64_t t0 = zigzag_chunk(z, rank, pt) * c;
            const Part& mine = parts[size_t(2 * rank + pt)];
            add_rows_to(out, mine.out, B, z.T, s.ldo, t0, c);
            add_rows_to(lse, mine.lse, BH, z.T, 1, t0, c);
            add_rows_to(dq, mine.dq, B, z.T, s.ldq, t0, c);
            add_rows_to(dkf, dk[size_t(2 * rank + pt)], B, z.T, s.ldkv, t0, c);
            add_rows_to(dvf, dv[size_t(2 * rank + pt)], B, z.T, s.ldkv, t0, c);
        }
    EXPECT_LT(error(out, full.out), 2e-5) << "out";
    EXPECT_LT(error(lse, full.lse), 2e-5) << "lse";
    EXPECT_LT(error(dq, full.dq), 5e-5) << "dq";
    EXPECT_LT(error(dkf, full.dk), 5e-5) << "dk";
    EXPECT_LT(error(dvf, full.dv), 5e-5) << "dv";
}

TEST_P(AttentionBlocksTest, ZigzagRingMatchesFullAttention) {
    check_zigzag_ring(2, 24, 4, 4);
    check_zigzag_ring(4, 12, 4, 2);  // grouped query
    check_zigzag_ring(1, 40, 2, 1);  // cp = 1: one rank, its two halves
}

INSTANTIATE_TEST_SUITE_P(Isas, AttentionBlocksTest, test::kAllIsas, test::isa_param_name);

}  // namespace
}  // namespace weft::kernels
