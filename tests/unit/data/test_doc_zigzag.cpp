// The per-document zigzag layout (data/doc_zigzag.hpp): a split document's pieces r and 2R-1-r
// on rank r, every token once, padding only where the length is not a multiple of 2R and then
// at the end of the document; short documents whole; a long-tailed micro-batch even over the
// ring where the row's zigzag is not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "weft/data/balance.hpp"
#include "weft/data/doc_zigzag.hpp"

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
