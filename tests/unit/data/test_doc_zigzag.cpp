// The per-document zigzag layout (data/doc_zigzag.hpp): a split document's pieces r and 2R-1-r
// on rank r, every token once, padding only where the length is not a multiple of 2R and then
// at the end of the document; short documents whole; a long-tailed micro-batch even over the
// ring where the row's zigzag is not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "weft/data/balance.hpp"
#include "weft/data/doc_zigzag.hpp"
#include "weft/kernels/attention/attention.hpp"
#include "weft/kernels/attention/merge.hpp"
#include "weft/kernels/attention/varlen.hpp"

namespace weft::data {
namespace {

// Every real token of every document exactly once, at its own position, and the padding
// (piece by piece) where the header says.
void expect_covered(const DocZigzag& z, const std::vector<Segment>& docs) {
    std::map<int64_t, std::vector<int>> seen;  // doc -> count per position
    for (size_t d = 0; d < docs.size(); ++d) seen[int64_t(d)].assign(size_t(docs[d].len), 0);
    int64_t padding = 0;
    for (const std::vector<DocPiece>& rank : z.ranks)
        for (const DocPiece& p : rank) {
            const Segment& doc = docs.at(size_t(p.doc));
            if (p.seg.first < 0) {
                EXPECT_GE(p.pos0, doc.len) << "padding inside document " << p.doc;
                padding += p.seg.len;
                continue;
            }
            EXPECT_EQ(p.seg.first, doc.first + p.pos0);
            for (int64_t i = p.pos0; i < p.pos0 + p.seg.len; ++i) ++seen[p.doc].at(size_t(i));
        }
    for (const auto& [d, counts] : seen)
        EXPECT_TRUE(std::all_of(counts.begin(), counts.end(), [](int c) { return c == 1; }))
            << "document " << d;
    EXPECT_EQ(padding, z.padding);
}

TEST(DocZigzag, LongDocumentSharedEvenlyPiecesRAnd2RMinus1MinusR) {
    const int R = 4;
    const std::vector<Segment> docs{{1000, 800}};  // 800 = 2R x 100: no padding
    const DocZigzag z = doc_zigzag(docs, R, split_above(4096, R));
    expect_covered(z, docs);
    EXPECT_EQ(z.padding, 0);
    for (int r = 0; r < R; ++r) {
        ASSERT_EQ(z.ranks[size_t(r)].size(), 2u);
        EXPECT_EQ(z.ranks[size_t(r)][0].pos0, 100 * r);
        EXPECT_EQ(z.ranks[size_t(r)][1].pos0, 100 * (2 * R - 1 - r));
    }
    const RankWork w = rank_work(z);
    EXPECT_EQ(w.squares_ratio(), 1.0);
    EXPECT_EQ(w.tokens_ratio(), 1.0);
}

TEST(DocZigzag, PaddedOnlyWhereNeededAtTheDocumentsEnd) {
    const int R = 2;
    const std::vector<Segment> docs{{0, 1001}, {5000, 1000}, {9000, 9}};
    const DocZigzag z = doc_zigzag(docs, R, 8);
    expect_covered(z, docs);
    // 1001 -> 4 x 251 (3 padding), 1000 -> 4 x 250 (none), 9 -> 4 x 3 (3 padding).
    EXPECT_EQ(z.padding, 6);
    EXPECT_EQ(rank_work(z).padding, 6);
}

TEST(DocZigzag, ShortDocumentsWholeOnOneRank) {
    const std::vector<Segment> docs{{0, 100}, {100, 30}, {130, 60}, {190, 10}};
    const DocZigzag z = doc_zigzag(docs, 2, 100);  // none longer than 100
    expect_covered(z, docs);
    EXPECT_EQ(z.padding, 0);
    for (const std::vector<DocPiece>& rank : z.ranks)
        for (const DocPiece& p : rank) EXPECT_EQ(p.seg.len, docs[size_t(p.doc)].len);
}

// The ring's calls cover every causal pair of every document exactly once, on the rows that
// hold those tokens, and nothing else.
TEST(DocZigzag, BlocksAreEveryDocumentsCausalPairsOnce) {
    std::mt19937_64 rng(3);
    for (const int R : {2, 4}) {
        std::vector<Segment> docs;
        int64_t at = 0;
        for (int d = 0; d < 12; ++d) {
            const int64_t n = 1 + int64_t(rng() % (d % 3 == 0 ? 300 : 40));
            docs.push_back({at, n});
            at += n + 7;  // not adjacent: a row's token is its document's, not a neighbour's
        }
        const DocZigzag z = doc_zigzag(docs, R, 16);
        // Each rank's rows: the file token each holds (-1: padding).
        std::vector<std::vector<int64_t>> rows(static_cast<size_t>(R));
        for (int r = 0; r < R; ++r)
            for (const DocPiece& p : z.ranks[size_t(r)])
                for (int64_t i = 0; i < p.seg.len; ++i)
                    rows[size_t(r)].push_back(p.seg.first < 0 ? -1 : p.seg.first + i);
        std::map<std::pair<int64_t, int64_t>, int> seen;  // (query token, key token)
        for (int qr = 0; qr < R; ++qr)
            for (int kr = 0; kr < R; ++kr)
                for (const DocBlock& b : doc_blocks(z, qr, kr)) {
                    EXPECT_LE(b.k_pos0, b.q_pos0 + b.Tq - 1) << "a call that scores nothing";
                    for (int64_t i = 0; i < b.Tq; ++i)
                        for (int64_t j = 0; j < b.Tk && b.k_pos0 + j <= b.q_pos0 + i; ++j)
                            ++seen[{rows[size_t(qr)].at(size_t(b.q_row + i)),
                                    rows[size_t(kr)].at(size_t(b.k_row + j))}];
                }
        std::map<std::pair<int64_t, int64_t>, int> want;
        for (const Segment& d : docs)
            for (int64_t i = 0; i < d.len; ++i)
                for (int64_t j = 0; j <= i; ++j) want[{d.first + i, d.first + j}] = 1;
        EXPECT_EQ(seen, want) << "cp " << R;
    }
}

// doc_blocks' calls, run with the dense kernel and merged as a ring would (each rank's queries
// against every rank's keys), give the packed batch's varlen attention, forward and backward,
// and leave the padding rows' gradients zero; so does the varlen kernel on the rows gathered
// into doc_order's sequence, as Ulysses would.
TEST(DocZigzag, RingCallsAndUlyssesOrderGiveVarlenAttention) {
    namespace k = weft::kernels;
    const int R = 2;
    const int64_t NH = 2, HS = 4, A = NH * HS;
    const std::vector<int64_t> lengths{37, 5, 64, 11, 3, 30};  // 37, 64, 30, 11 split; 37 padded
    std::vector<Segment> docs;
    std::vector<int64_t> cu{0};
    for (int64_t n : lengths) {
        docs.push_back({cu.back(), n});
        cu.push_back(cu.back() + n);
    }
    const int64_t N = cu.back();
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal;
    const auto random = [&](int64_t n) {
        std::vector<float> x(static_cast<size_t>(n));
        for (float& e : x) e = normal(rng);
        return x;
    };
    const std::vector<float> q = random(N * A), kk = random(N * A), v = random(N * A),
                             dout = random(N * A);
    const k::AttentionShape whole{1, N, N, NH, HS, A, A, A, 0, NH, 0};
    std::vector<float> out(size_t(N * A)), lse(size_t(NH * N)), dq(size_t(N * A), 0),
        dk(size_t(N * A), 0), dv(size_t(N * A), 0);
    k::attention_forward_varlen(out.data(), lse.data(), q.data(), kk.data(), v.data(), whole, cu);
    k::attention_backward_varlen(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), kk.data(),
                                 v.data(), out.data(), lse.data(), whole, cu);

    const DocZigzag z = doc_zigzag(docs, R, 10);
    ASSERT_GT(z.padding, 0);
    // Each rank's rows: the token each holds (-1: padding), and its q, k, v, dout gathered.
    struct Local {
        std::vector<int64_t> token;
        std::vector<float> q, k, v, dout, dq, dk, dv;
    };
    std::vector<Local> ranks(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
        Local& l = ranks[size_t(r)];
        for (const DocPiece& p : z.ranks[size_t(r)])
            for (int64_t i = 0; i < p.seg.len; ++i)
                l.token.push_back(p.seg.first < 0 ? -1 : p.seg.first + i);
        const size_t L = l.token.size();
        for (std::vector<float>* x : {&l.q, &l.k, &l.v, &l.dout, &l.dq, &l.dk, &l.dv})
            x->assign(L * size_t(A), 0.0f);
        for (size_t t = 0; t < L; ++t) {
            if (l.token[t] < 0) continue;
            const size_t from = size_t(l.token[t] * A);
            std::copy_n(&q[from], A, &l.q[t * size_t(A)]);
            std::copy_n(&kk[from], A, &l.k[t * size_t(A)]);
            std::copy_n(&v[from], A, &l.v[t * size_t(A)]);
            std::copy_n(&dout[from], A, &l.dout[t * size_t(A)]);
        }
    }
    // Forward: a running (out, lse) per query piece, by its first row.
    struct Running {
        std::vector<float> out, lse;
    };
    std::vector<std::map<int64_t, Running>> running(static_cast<size_t>(R));
    const auto shape = [&](const DocBlock& b) {
        return k::AttentionShape{1, b.Tq, b.Tk, NH, HS, A, A, A, b.q_pos0, NH, b.k_pos0};
    };
    for (int qr = 0; qr < R; ++qr)
        for (int kr = 0; kr < R; ++kr)
            for (const DocBlock& b : doc_blocks(z, qr, kr)) {
                Running& run = running[size_t(qr)][b.q_row];
                if (run.lse.empty()) {
                    run.out.assign(size_t(b.Tq * A), 0.0f);
                    run.lse.assign(size_t(NH * b.Tq), -std::numeric_limits<float>::infinity());
                }
                std::vector<float> part(size_t(b.Tq * A)), part_lse(size_t(NH * b.Tq));
                const Local &ql = ranks[size_t(qr)], &kl = ranks[size_t(kr)];
                k::attention_forward(part.data(), part_lse.data(), &ql.q[size_t(b.q_row * A)],
                                     &kl.k[size_t(b.k_row * A)], &kl.v[size_t(b.k_row * A)],
                                     shape(b));
                k::attention_merge(run.out.data(), run.lse.data(), part.data(), part_lse.data(),
                                   k::MergeShape{1, b.Tq, NH, HS, A, A});
            }
    for (int qr = 0; qr < R; ++qr)
        for (const auto& [row, run] : running[size_t(qr)]) {
            const int64_t Tq = int64_t(run.lse.size()) / NH;
            for (int64_t t = 0; t < Tq; ++t) {
                const int64_t tok = ranks[size_t(qr)].token[size_t(row + t)];
                ASSERT_GE(tok, 0);
                for (int64_t h = 0; h < NH; ++h)
                    EXPECT_NEAR(run.lse[size_t(h * Tq + t)], lse[size_t(h * N + tok)], 1e-5);
                for (int64_t e = 0; e < A; ++e)
                    EXPECT_NEAR(run.out[size_t(t * A + e)], out[size_t(tok * A + e)], 1e-5);
            }
        }
    // Backward: each block's share with the merged (out, lse) of its queries.
    for (int qr = 0; qr < R; ++qr)
        for (int kr = 0; kr < R; ++kr)
            for (const DocBlock& b : doc_blocks(z, qr, kr)) {
                const Running& run = running[size_t(qr)].at(b.q_row);
                Local &ql = ranks[size_t(qr)], &kl = ranks[size_t(kr)];
                k::attention_backward(&ql.dq[size_t(b.q_row * A)], &kl.dk[size_t(b.k_row * A)],
                                      &kl.dv[size_t(b.k_row * A)], &ql.dout[size_t(b.q_row * A)],
                                      &ql.q[size_t(b.q_row * A)], &kl.k[size_t(b.k_row * A)],
                                      &kl.v[size_t(b.k_row * A)], run.out.data(), run.lse.data(),
                                      shape(b));
            }
    for (const Local& l : ranks)
        for (size_t t = 0; t < l.token.size(); ++t)
            for (int64_t e = 0; e < A; ++e) {
                const size_t i = t * size_t(A) + size_t(e);
                const size_t ref = size_t(std::max<int64_t>(l.token[t], 0) * A + e);
                const bool pad = l.token[t] < 0;
                EXPECT_NEAR(l.dq[i], pad ? 0.0f : dq[ref], 1e-5);
                EXPECT_NEAR(l.dk[i], pad ? 0.0f : dk[ref], 1e-5);
                EXPECT_NEAR(l.dv[i], pad ? 0.0f : dv[ref], 1e-5);
            }
    // Ulysses: every rank's rows gathered into doc_order's sequence.
    const DocOrder order = doc_order(z);
    const int64_t M = order.cu_seqlens.back();
    EXPECT_EQ(M, N + z.padding);
    std::vector<float> gq(size_t(M * A)), gk(size_t(M * A)), gv(size_t(M * A)),
        gdout(size_t(M * A)), gout(size_t(M * A)), glse(size_t(NH * M)), gdq(size_t(M * A), 0),
        gdk(size_t(M * A), 0), gdv(size_t(M * A), 0);
    for (int r = 0; r < R; ++r) {
        const Local& l = ranks[size_t(r)];
        ASSERT_EQ(order.slots[size_t(r)].size(), l.token.size());
        for (size_t t = 0; t < l.token.size(); ++t) {
            const size_t to = size_t(order.slots[size_t(r)][t] * A), from = t * size_t(A);
            std::copy_n(&l.q[from], A, &gq[to]);
            std::copy_n(&l.k[from], A, &gk[to]);
            std::copy_n(&l.v[from], A, &gv[to]);
            std::copy_n(&l.dout[from], A, &gdout[to]);
        }
    }
    const k::AttentionShape gathered{1, M, M, NH, HS, A, A, A, 0, NH, 0};
    k::attention_forward_varlen(gout.data(), glse.data(), gq.data(), gk.data(), gv.data(), gathered,
                                order.cu_seqlens);
    k::attention_backward_varlen(gdq.data(), gdk.data(), gdv.data(), gdout.data(), gq.data(),
                                 gk.data(), gv.data(), gout.data(), glse.data(), gathered,
                                 order.cu_seqlens);
    for (int r = 0; r < R; ++r) {
        const Local& l = ranks[size_t(r)];
        for (size_t t = 0; t < l.token.size(); ++t) {
            if (l.token[t] < 0) continue;
            const size_t g = size_t(order.slots[size_t(r)][t] * A), ref = size_t(l.token[t] * A);
            for (int64_t e = 0; e < A; ++e) {
                EXPECT_NEAR(gout[g + size_t(e)], out[ref + size_t(e)], 1e-5);
                EXPECT_NEAR(gdq[g + size_t(e)], dq[ref + size_t(e)], 1e-5);
                EXPECT_NEAR(gdk[g + size_t(e)], dk[ref + size_t(e)], 1e-5);
                EXPECT_NEAR(gdv[g + size_t(e)], dv[ref + size_t(e)], 1e-5);
            }
        }
    }
}

// fit_rows: long-tailed rows of T laid out over R ranks come out exactly T / R rows a rank
// (doc_zigzag's own layout exceeds it on some), every token once at its own position, the
// calls still every causal pair once, and the busiest rank within 5% of the mean.
TEST(DocZigzag, FitRowsGivesEveryRankTheSameRowsExactly) {
    const int64_t T = 4096;
    std::mt19937_64 rng(11);
    std::lognormal_distribution<double> length(std::log(60.0), 1.2);
    int over = 0;
    for (const int R : {2, 4}) {
        for (int trial = 0; trial < 10; ++trial) {
            std::vector<Segment> docs;
            for (int64_t at = 0, n = T / 3; at < T;
                 n = std::max<int64_t>(1, int64_t(length(rng)))) {
                n = std::min(n, T - at);
                docs.push_back({at, n});
                at += n;
            }
            DocZigzag z = doc_zigzag(docs, R, split_above(T, R));
            for (const std::vector<DocPiece>& mine : z.ranks) {
                int64_t n = 0;
                for (const DocPiece& p : mine) n += p.seg.len;
                over += n > T / R;
            }
            fit_rows(z, T / R);
            std::vector<int> seen(size_t(T), 0);
            std::vector<std::vector<int64_t>> rows(static_cast<size_t>(R));
            for (int r = 0; r < R; ++r) {
                for (const DocPiece& p : z.ranks[size_t(r)]) {
                    for (int64_t i = 0; i < p.seg.len; ++i) {
                        rows[size_t(r)].push_back(p.seg.first < 0 ? -1 : p.seg.first + i);
                        if (p.seg.first >= 0) ++seen[size_t(p.seg.first + i)];
                    }
                    if (p.seg.first >= 0) {
                        EXPECT_EQ(p.seg.first, docs[size_t(p.doc)].first + p.pos0);
                    }
                }
                EXPECT_EQ(int64_t(rows[size_t(r)].size()), T / R) << "cp " << R << " rank " << r;
            }
            EXPECT_EQ(seen, std::vector<int>(size_t(T), 1)) << "cp " << R;
            int64_t pairs = 0;
            for (int qr = 0; qr < R; ++qr)
                for (int kr = 0; kr < R; ++kr)
                    for (const DocBlock& b : doc_blocks(z, qr, kr))
                        for (int64_t i = 0; i < b.Tq; ++i) {
                            const int64_t qt = rows[size_t(qr)][size_t(b.q_row + i)];
                            for (int64_t j = 0; j < b.Tk && b.k_pos0 + j <= b.q_pos0 + i; ++j) {
                                const int64_t kt = rows[size_t(kr)][size_t(b.k_row + j)];
                                ASSERT_TRUE(kt >= 0 && kt <= qt) << "cp " << R;
                                ++pairs;
                            }
                        }
            int64_t want = 0;
            for (const Segment& d : docs) want += d.len * (d.len + 1) / 2;
            EXPECT_EQ(pairs, want) << "cp " << R;
            const RankWork w = rank_work(z);
            double sum = 0;
            for (double x : w.squares) sum += x;
            EXPECT_LT(w.max_squares() / (sum / R), 1.05) << "cp " << R;
        }
    }
    EXPECT_GT(over, 0) << "no layout needed fitting";
}

// A long-tailed micro-batch of one row of T (lengths ~ lognormal, cut at the row's end, as
// packing cuts a window): the row's zigzag leaves a rank far over the mean, the per-document
// split within a few percent, for a fraction of a percent of padding.
TEST(DocZigzag, LongTailedRowsComeOutEven) {
    const int64_t T = 32768;
    std::mt19937_64 rng(7);
    std::lognormal_distribution<double> length(std::log(300.0), 1.2);
    for (const int R : {2, 4, 8}) {
        double row_worst = 0, doc_worst = 0;
        int64_t padding = 0;
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<Segment> docs;
            int64_t at = 0;
            // One long document, then a tail of short ones: the mix the row's zigzag shares worst.
            for (int64_t n = T / 3; at < T; n = std::max<int64_t>(1, int64_t(length(rng)))) {
                n = std::min(n, T - at);
                docs.push_back({at, n});
                at += n;
            }
            const RankWork row = rank_work(static_rows(std::vector<Row>{docs}, 1, R));
            const RankWork doc = rank_work(doc_zigzag(docs, R, split_above(T, R)));
            const auto over = [R](const RankWork& w) {
                double sum = 0;
                for (double s : w.squares) sum += s;
                return w.max_squares() / (sum / R);
            };
            row_worst = std::max(row_worst, over(row));
            doc_worst = std::max(doc_worst, over(doc));
            padding += doc.padding;
        }
        EXPECT_GT(row_worst, 1.2) << "cp " << R;
        EXPECT_LT(doc_worst, 1.05) << "cp " << R;
        EXPECT_LT(double(padding), 0.01 * 20 * T) << "cp " << R;
        std::printf(
            "cp %d: busiest rank over the mean, worst of 20 rows: row's zigzag %.3f, "
            "per-document %.3f; padding %.3f%%\n",
            R, row_worst, doc_worst, 100.0 * double(padding) / (20.0 * double(T)));
    }
}

}  // namespace
}  // namespace weft::data
