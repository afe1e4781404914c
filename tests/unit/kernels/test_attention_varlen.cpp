// Attention over packed documents: the outputs and gradients of each document are those of the
// document run alone (bit for bit, fp32 and bf16), the masked softmax matches a double reference,
// the backward matches central finite differences of the forward, no document's inputs reach
// another's outputs, the result does not depend on the thread count, and bad boundaries are
// refused. The block kernels of ring attention over packed rows, merged over a row's chunks, give
// the varlen kernel's outputs and gradients, and skip the blocks no document spans.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/check.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/kernels/attention/varlen.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::kernels {
namespace {

// Two rows of 50: documents of 7, 33 and 10, then 1 and 49 (long enough to run alone on two
// threads while the others run side by side). Grouped-query heads, padded rows.
constexpr int64_t B = 2, T = 50, NH = 4, NKV = 2, HS = 16, pad = 3;
const std::vector<int64_t> kCu{0, 7, 40, 50, 51, 100};

AttentionShape shape() {
    return {B, T, T, NH, HS, NH * HS + pad, NKV * HS + pad, NH * HS + 2 * pad, 0, NKV};
}

struct Inputs {
    std::vector<float> q, k, v, dout;
};

Inputs inputs(float scale = 1.0f) {
    const AttentionShape s = shape();
    return {test::random_vector(size_t(B * T * s.ldq), 1, scale),
            test::random_vector(size_t(B * T * s.ldkv), 2, scale),
            test::random_vector(size_t(B * T * s.ldkv), 3),
            test::random_vector(size_t(B * T * s.ldo), 4)};
}

struct Result {
    std::vector<float> out, lse, dq, dk, dv;
};

Result run(const Inputs& in) {
    const AttentionShape s = shape();
    Result r{std::vector<float>(in.dout.size()), std::vector<float>(size_t(B * NH * T)),
             std::vector<float>(in.q.size()), std::vector<float>(in.k.size()),
             std::vector<float>(in.v.size())};
    attention_forward_varlen(r.out.data(), r.lse.data(), in.q.data(), in.k.data(), in.v.data(), s,
                             kCu);
    attention_backward_varlen(r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), in.q.data(),
                              in.k.data(), in.v.data(), r.out.data(), r.lse.data(), s, kCu);
    return r;
}

// The document of rows [r0, r0 + n) as a batch of its own: attention.hpp's kernel on it.
Result run_alone(const Inputs& in, int64_t r0, int64_t n) {
    const AttentionShape s = shape();
    AttentionShape one = s;
    one.B = 1;
    one.Tq = one.Tk = n;
    Result r{std::vector<float>(size_t(n * s.ldo)), std::vector<float>(size_t(NH * n)),
             std::vector<float>(size_t(n * s.ldq)), std::vector<float>(size_t(n * s.ldkv)),
             std::vector<float>(size_t(n * s.ldkv))};
    const float *q = in.q.data() + r0 * s.ldq, *k = in.k.data() + r0 * s.ldkv;
    const float *v = in.v.data() + r0 * s.ldkv, *dout = in.dout.data() + r0 * s.ldo;
    attention_forward(r.out.data(), r.lse.data(), q, k, v, one);
    attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout, q, k, v, r.out.data(),
                       r.lse.data(), one);
    return r;
}

// x rounded to bf16 in place (so that fp32 runs see the same values), and its bf16 bits.
std::vector<uint16_t> to16(std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_fp32(h[i] = fp32_to_bf16(x[i]));
    return h;
}

bool same_rows(const std::vector<float>& packed, const std::vector<float>& alone, int64_t r0,
               int64_t n, int64_t ld) {
    return std::equal(alone.begin(), alone.begin() + n * ld, packed.begin() + r0 * ld);
}

TEST(AttentionVarlen, EachDocumentAsIfAlone) {
    const Inputs in = inputs();
    const Result r = run(in);
    const AttentionShape s = shape();
    for (size_t d = 0; d + 1 < kCu.size(); ++d) {
        const int64_t r0 = kCu[d], n = kCu[d + 1] - r0, b = r0 / T, t0 = r0 % T;
        SCOPED_TRACE("document at " + std::to_string(r0));
        const Result a = run_alone(in, r0, n);
        EXPECT_TRUE(same_rows(r.out, a.out, r0, n, s.ldo));
        EXPECT_TRUE(same_rows(r.dq, a.dq, r0, n, s.ldq));
        EXPECT_TRUE(same_rows(r.dk, a.dk, r0, n, s.ldkv));
        EXPECT_TRUE(same_rows(r.dv, a.dv, r0, n, s.ldkv));
        for (int64_t h = 0; h < NH; ++h)
            for (int64_t t = 0; t < n; ++t)
                ASSERT_EQ(r.lse[size_t((b * NH + h) * T + t0 + t)], a.lse[size_t(h * n + t)]);
        // And the masked softmax itself, in double.
        AttentionShape one = s;
        one.B = 1;
        one.Tq = one.Tk = n;
        auto slice = [&](const std::vector<float>& x, int64_t ld) {
            return std::vector<double>(x.begin() + r0 * ld, x.begin() + (r0 + n) * ld);
        };
        const test::Reference ref = test::reference(one, slice(in.q, s.ldq), slice(in.k, s.ldkv),
                                                    slice(in.v, s.ldkv), slice(in.dout, s.ldo));
        for (int64_t t = 0; t < n; ++t)
            for (int64_t c = 0; c < NH * HS; ++c) {
                ASSERT_NEAR(r.out[size_t((r0 + t) * s.ldo + c)], ref.out[size_t(t * s.ldo + c)],
                            2e-5);
                ASSERT_NEAR(r.dq[size_t((r0 + t) * s.ldq + c)], ref.dq[size_t(t * s.ldq + c)],
                            5e-5);
            }
    }
}

// ∂(Σ out ⊙ dout)/∂x by central differences at a spread of entries of q, k and v, against the
// analytic backward: entries of every document, the first and last rows of rows and documents.
TEST(AttentionVarlen, BackwardMatchesFiniteDifferences) {
    Inputs in = inputs(0.5f);
    const Result r = run(in);
    const AttentionShape s = shape();
    auto loss = [&] {
        std::vector<float> out(in.dout.size()), lse(size_t(B * NH * T));
        attention_forward_varlen(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s,
                                 kCu);
        double sum = 0;
        for (size_t i = 0; i < out.size(); ++i) sum += double(out[i]) * in.dout[i];
        return sum;
    };
    const std::vector<int64_t> rows{0, 6, 7, 20, 39, 40, 49, 50, 51, 75, 99};
    auto check = [&](std::vector<float>& x, const std::vector<float>& g, int64_t ld, int64_t C,
                     const char* name) {
        std::vector<size_t> at;
        for (int64_t row : rows) at.push_back(size_t(row * ld + (row * 7) % C));
        const std::vector<double> fd = test::finite_difference(x, loss, at, 1e-2f);
        for (size_t i = 0; i < at.size(); ++i)
            EXPECT_NEAR(g[at[i]], fd[i], 2e-3 + 2e-3 * std::abs(fd[i]))
                << name << " at row " << rows[i];
    };
    check(in.q, r.dq, s.ldq, NH * HS, "dq");
    check(in.k, r.dk, s.ldkv, NKV * HS, "dk");
    check(in.v, r.dv, s.ldkv, NKV * HS, "dv");
}

// Changing every input of the middle document of row 0 changes no output or gradient outside it.
TEST(AttentionVarlen, DocumentsDoNotSeeEachOther) {
    const Inputs in = inputs();
    Inputs other = in;
    const AttentionShape s = shape();
    for (int64_t r = 7; r < 40; ++r) {
        for (int64_t c = 0; c < s.ldq; ++c) other.q[size_t(r * s.ldq + c)] += 1.0f;
        for (int64_t c = 0; c < s.ldkv; ++c) other.k[size_t(r * s.ldkv + c)] -= 0.5f;
        for (int64_t c = 0; c < s.ldkv; ++c) other.v[size_t(r * s.ldkv + c)] *= 2.0f;
        for (int64_t c = 0; c < s.ldo; ++c) other.dout[size_t(r * s.ldo + c)] += 0.25f;
    }
    const Result a = run(in), b = run(other);
    auto outside = [&](const std::vector<float>& x, const std::vector<float>& y, int64_t ld) {
        return std::equal(x.begin(), x.begin() + 7 * ld, y.begin()) &&
               std::equal(x.begin() + 40 * ld, x.end(), y.begin() + 40 * ld);
    };
    EXPECT_TRUE(outside(a.out, b.out, s.ldo));
    EXPECT_TRUE(outside(a.dq, b.dq, s.ldq));
    EXPECT_TRUE(outside(a.dk, b.dk, s.ldkv));
    EXPECT_TRUE(outside(a.dv, b.dv, s.ldkv));
    EXPECT_FALSE(std::equal(a.out.begin(), a.out.end(), b.out.begin()));
}

TEST(AttentionVarlen, SameOnOneThreadAsOnTwo) {
    const Inputs in = inputs();
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Result one = run(in);
    omp_set_num_threads(2);
    const Result two = run(in);
    omp_set_num_threads(threads);
    EXPECT_EQ(one.out, two.out);
    EXPECT_EQ(one.lse, two.lse);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
}

// bf16: each document as the bf16 kernel runs it alone, bit for bit, and near the fp32 result of
// the same (bf16-exact) inputs.
TEST(AttentionVarlen, Bf16AsIfAlone) {
    Inputs in = inputs();
    const std::vector<uint16_t> q = to16(in.q), k = to16(in.k), v = to16(in.v),
                                dout = to16(in.dout);
    const AttentionShape s = shape();
    std::vector<uint16_t> out(dout.size());
    std::vector<float> lse(size_t(B * NH * T)), dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward_varlen_bf16(out.data(), lse.data(), q.data(), k.data(), v.data(), s, kCu);
    attention_backward_varlen_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                   v.data(), out.data(), lse.data(), s, kCu);
    const Result f32 = run(in);
    for (size_t d = 0; d + 1 < kCu.size(); ++d) {
        const int64_t r0 = kCu[d], n = kCu[d + 1] - r0;
        AttentionShape one = s;
        one.B = 1;
        one.Tq = one.Tk = n;
        std::vector<uint16_t> o1(size_t(n * s.ldo));
        std::vector<float> l1(size_t(NH * n)), dq1(size_t(n * s.ldq)), dk1(size_t(n * s.ldkv)),
            dv1(size_t(n * s.ldkv));
        attention_forward_bf16(o1.data(), l1.data(), q.data() + r0 * s.ldq, k.data() + r0 * s.ldkv,
                               v.data() + r0 * s.ldkv, one);
        attention_backward_bf16(dq1.data(), dk1.data(), dv1.data(), dout.data() + r0 * s.ldo,
                                q.data() + r0 * s.ldq, k.data() + r0 * s.ldkv,
                                v.data() + r0 * s.ldkv, o1.data(), l1.data(), one);
        EXPECT_TRUE(std::equal(o1.begin(), o1.end(), out.begin() + r0 * s.ldo)) << r0;
        EXPECT_TRUE(std::equal(dq1.begin(), dq1.end(), dq.begin() + r0 * s.ldq)) << r0;
        EXPECT_TRUE(std::equal(dk1.begin(), dk1.end(), dk.begin() + r0 * s.ldkv)) << r0;
        EXPECT_TRUE(std::equal(dv1.begin(), dv1.end(), dv.begin() + r0 * s.ldkv)) << r0;
    }
    for (int64_t r = 0; r < B * T; ++r)
        for (int64_t c = 0; c < NH * HS; ++c)
            ASSERT_NEAR(bf16_to_fp32(out[size_t(r * s.ldo + c)]), f32.out[size_t(r * s.ldo + c)],
                        3e-2);
    EXPECT_LT(test::max_abs_diff(dq.data(), f32.dq.data(), dq.size()), 5e-2);
}

// A ring's view of the rows: each row cut into chunks of 10, every (query chunk, key chunk)
// block run by the block kernel with the row's documents and merged by lse, as ring attention
// merges them; backward adds each block's gradients given the merged out and lse. V (float, or
// uint16_t for bf16) is the operands' type; out is returned fp32.
template <class V>
Result merged_blocks(const std::vector<V>& q, const std::vector<V>& k, const std::vector<V>& v,
                     const std::vector<V>& dout,
                     std::vector<std::pair<int64_t, int64_t>>* skipped) {
    constexpr int64_t C = 10, chunks = T / C;
    const AttentionShape s = shape();
    const std::vector<std::vector<int64_t>> starts = row_starts(kCu, B, T);
    Result r{std::vector<float>(dout.size()), std::vector<float>(size_t(B * NH * T)),
             std::vector<float>(q.size()), std::vector<float>(k.size()),
             std::vector<float>(v.size())};
    std::vector<V> part(size_t(C * s.ldo)), out16(dout.size());
    std::vector<float> part32(size_t(C * s.ldo)), part_lse(size_t(NH * C));
    // The merged lse of each (row, query chunk): [NH][C], the ring's layout.
    std::vector<float> lse(size_t(B * chunks * NH * C), -INFINITY);
    auto block = [&](int64_t i, int64_t j) {
        AttentionShape one = s;
        one.B = 1, one.Tq = one.Tk = C, one.q_pos0 = i * C, one.k_pos0 = j * C;
        return one;
    };
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < chunks; ++i)
            for (int64_t j = 0; j < chunks; ++j) {
                const int64_t qr = b * T + i * C, kr = b * T + j * C;
                bool seen;
                if constexpr (sizeof(V) == 4) {
                    seen = attention_forward_block_documents(
                        part32.data(), part_lse.data(), q.data() + qr * s.ldq,
                        k.data() + kr * s.ldkv, v.data() + kr * s.ldkv, block(i, j),
                        starts[size_t(b)]);
                } else {
                    seen = attention_forward_block_documents_bf16(
                        part.data(), part_lse.data(), q.data() + qr * s.ldq, k.data() + kr * s.ldkv,
                        v.data() + kr * s.ldkv, block(i, j), starts[size_t(b)]);
                    for (size_t x = 0; x < part.size(); ++x) part32[x] = bf16_to_fp32(part[x]);
                }
                if (!seen) {
                    skipped->emplace_back(b * chunks + i, j);
                    continue;
                }
                attention_merge(r.out.data() + qr * s.ldo, lse.data() + (b * chunks + i) * NH * C,
                                part32.data(), part_lse.data(),
                                MergeShape{1, C, NH, HS, s.ldo, s.ldo});
            }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < chunks; ++i)
            for (int64_t h = 0; h < NH; ++h)
                std::copy_n(lse.data() + ((b * chunks + i) * NH + h) * C, C,
                            r.lse.data() + (b * NH + h) * T + i * C);
    // Backward on the merged output as the model keeps it (bf16: rounded).
    for (size_t x = 0; x < out16.size(); ++x) {
        if constexpr (sizeof(V) == 4) {
            out16[x] = r.out[x];
        } else {
            out16[x] = fp32_to_bf16(r.out[x]);
        }
    }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < chunks; ++i)
            for (int64_t j = 0; j < chunks; ++j) {
                const int64_t qr = b * T + i * C, kr = b * T + j * C;
                const float* l = lse.data() + (b * chunks + i) * NH * C;
                if constexpr (sizeof(V) == 4) {
                    attention_backward_block_documents(
                        r.dq.data() + qr * s.ldq, r.dk.data() + kr * s.ldkv,
                        r.dv.data() + kr * s.ldkv, dout.data() + qr * s.ldo, q.data() + qr * s.ldq,
                        k.data() + kr * s.ldkv, v.data() + kr * s.ldkv, out16.data() + qr * s.ldo,
                        l, block(i, j), starts[size_t(b)]);
                } else {
                    attention_backward_block_documents_bf16(
                        r.dq.data() + qr * s.ldq, r.dk.data() + kr * s.ldkv,
                        r.dv.data() + kr * s.ldkv, dout.data() + qr * s.ldo, q.data() + qr * s.ldq,
                        k.data() + kr * s.ldkv, v.data() + kr * s.ldkv, out16.data() + qr * s.ldo,
                        l, block(i, j), starts[size_t(b)]);
                }
            }
    return r;
}

TEST(AttentionVarlen, RingBlocksMergeToTheVarlenKernel) {
    const Inputs in = inputs();
    const Result want = run(in);
    std::vector<std::pair<int64_t, int64_t>> skipped;
    const Result got = merged_blocks(in.q, in.k, in.v, in.dout, &skipped);
    EXPECT_LT(test::max_abs_diff(got.out.data(), want.out.data(), got.out.size()), 2e-6);
    EXPECT_LT(test::max_abs_diff(got.lse.data(), want.lse.data(), got.lse.size()), 1e-5);
    EXPECT_LT(test::max_abs_diff(got.dq.data(), want.dq.data(), got.dq.size()), 1e-5);
    EXPECT_LT(test::max_abs_diff(got.dk.data(), want.dk.data(), got.dk.size()), 1e-5);
    EXPECT_LT(test::max_abs_diff(got.dv.data(), want.dv.data(), got.dv.size()), 1e-5);
    // Skipped: every key chunk after its query chunk (10 a row), and row 0's chunk 4 (its
    // document [40, 50) alone) against the chunks before it; row 0's [7, 40) spans chunks 0-3
    // and row 1's [1, 50) every chunk.
    std::vector<std::pair<int64_t, int64_t>> want_skipped;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < 5; ++i)
            for (int64_t j = 0; j < 5; ++j)
                if (j > i || (b == 0 && i == 4 && j < 4)) want_skipped.emplace_back(b * 5 + i, j);
    EXPECT_EQ(skipped, want_skipped);
}

TEST(AttentionVarlen, Bf16RingBlocksMergeNearTheVarlenKernel) {
    Inputs in = inputs();
    const std::vector<uint16_t> q = to16(in.q), k = to16(in.k), v = to16(in.v),
                                dout = to16(in.dout);
    const Result want = run(in);  // fp32 on the same bf16-exact inputs
    std::vector<std::pair<int64_t, int64_t>> skipped;
    const Result got = merged_blocks(q, k, v, dout, &skipped);
    EXPECT_LT(test::max_abs_diff(got.out.data(), want.out.data(), got.out.size()), 3e-2);
    EXPECT_LT(test::max_abs_diff(got.dq.data(), want.dq.data(), got.dq.size()), 5e-2);
    EXPECT_LT(test::max_abs_diff(got.dk.data(), want.dk.data(), got.dk.size()), 5e-2);
    EXPECT_LT(test::max_abs_diff(got.dv.data(), want.dv.data(), got.dv.size()), 5e-2);
    EXPECT_EQ(skipped.size(), size_t(2 * 10 + 4));
}

TEST(AttentionVarlen, BlockRefusesStartsNotFromZero) {
    const AttentionShape s{1, 4, 4, NH, HS, NH * HS, NKV * HS, NH * HS, 0, NKV};
    std::vector<float> x(size_t(4 * NH * HS)), lse(size_t(NH * 4));
    EXPECT_EQ(test::error_of([&] {
                  attention_forward_block_documents(x.data(), lse.data(), x.data(), x.data(),
                                                    x.data(), s, std::vector<int64_t>{2, 3});
              }),
              "attention_forward_block_documents: 2 document starts, expected strictly "
              "increasing ones from 0");
}

TEST(AttentionVarlen, RefusesBoundariesThatCrossARow) {
    EXPECT_NO_THROW(check_cu_seqlens(kCu, B, T));
    EXPECT_EQ(test::error_of([] {
                  check_cu_seqlens(std::vector<int64_t>{0, 7, 60, 100}, B, T);
              }),
              "document boundaries: entry 2 is 60 after 7, expected a larger one no later than "
              "the end of its row at 50 (rows of T=50)");
    EXPECT_NE(test::error_of([] {
                  check_cu_seqlens(std::vector<int64_t>{0, 50, 99}, B, T);
              }).find("from 0 to B*T = 100"),
              std::string::npos);
}

}  // namespace
}  // namespace weft::kernels
