#include "weft/data/doc_zigzag.hpp"

#include <algorithm>
#include <numeric>

#include "weft/core/error.hpp"

namespace weft::data {

namespace {

// Positions [p0, p1) of a document: each query i scores i + 1 keys, counted 2i + 1 (n^2 a
// whole document of n, as balance.hpp counts).
double piece_work(int64_t p0, int64_t p1) {
    return double(p1) * double(p1) - double(p0) * double(p0);
}

}  // namespace

DocZigzag doc_zigzag(std::span<const Segment> docs, int ring, int64_t above) {
    WEFT_CHECK(ring >= 1, "internal: a ring of {} ranks", ring);
    DocZigzag out{ring, std::vector<std::vector<DocPiece>>(size_t(ring)), 0};
    std::vector<double> work(size_t(ring), 0);
    std::vector<int64_t> tokens(size_t(ring), 0);
    std::vector<int64_t> whole;
    int64_t all = 0;
    const int64_t pieces = 2 * int64_t(ring);
    for (size_t d = 0; d < docs.size(); ++d) {
        const int64_t n = docs[d].len;
        all += n;
        if (ring == 1 || n <= above) {
            whole.push_back(int64_t(d));
            continue;
        }
        const int64_t m = (n + pieces - 1) / pieces;
        out.padding += pieces * m - n;
        for (int r = 0; r < ring; ++r) {
            for (const int64_t i : {int64_t(r), pieces - 1 - r}) {
                const int64_t p0 = i * m, p1 = std::min(n, p0 + m);
                std::vector<DocPiece>& mine = out.ranks[size_t(r)];
                if (p1 > p0) mine.push_back({{docs[d].first + p0, p1 - p0}, p0, int64_t(d)});
                if (p0 + m > std::max(p0, p1))
                    mine.push_back({{-1, p0 + m - std::max(p0, p1)}, std::max(p0, p1), int64_t(d)});
                work[size_t(r)] += piece_work(p0, std::max(p0, p1));
                tokens[size_t(r)] += m;
            }
        }
    }
    // The even share of tokens: every rank's rows are as long as the longest's.
    const int64_t share = (all + out.padding + ring - 1) / ring;
    std::stable_sort(whole.begin(), whole.end(), [&](int64_t a, int64_t b) {
        return docs[size_t(a)].len > docs[size_t(b)].len;
    });
    for (const int64_t d : whole) {
        const int64_t n = docs[size_t(d)].len;
        int best = -1;
        for (int r = 0; r < ring; ++r) {
            if (tokens[size_t(r)] + n > share) continue;
            if (best < 0 || std::pair(work[size_t(r)], tokens[size_t(r)]) <
                                std::pair(work[size_t(best)], tokens[size_t(best)]))
                best = r;
        }
        if (best < 0)  // no rank has room: the one with the fewest tokens
            best = int(std::min_element(tokens.begin(), tokens.end()) - tokens.begin());
        out.ranks[size_t(best)].push_back({docs[size_t(d)], 0, d});
        work[size_t(best)] += piece_work(0, n);
        tokens[size_t(best)] += n;
    }
    return out;
}

void fit_rows(DocZigzag& layout, int64_t rows) {
    std::vector<DocPiece> spill;
    std::vector<int64_t> tokens;
    for (std::vector<DocPiece>& mine : layout.ranks) {
        std::erase_if(mine, [](const DocPiece& p) { return p.seg.first < 0; });
        int64_t n = 0;
        for (const DocPiece& p : mine) n += p.seg.len;
        while (n > rows) {
            DocPiece& last = mine.back();
            const int64_t over = std::min(n - rows, last.seg.len), keep = last.seg.len - over;
            spill.push_back({{last.seg.first + keep, over}, last.pos0 + keep, last.doc});
            n -= over;
            if (keep == 0) {
                mine.pop_back();
            } else {
                last.seg.len = keep;
            }
        }
        tokens.push_back(n);
    }
    size_t r = 0;
    for (DocPiece p : spill)
        while (p.seg.len > 0) {
            for (; r < tokens.size() && tokens[r] == rows; ++r) {
            }
            WEFT_CHECK(r < tokens.size(), "internal: more tokens than {} ranks of {} rows",
                       layout.ring, rows);
            const int64_t take = std::min(p.seg.len, rows - tokens[r]);
            layout.ranks[r].push_back({{p.seg.first, take}, p.pos0, p.doc});
            tokens[r] += take;
            p.seg = {p.seg.first + take, p.seg.len - take};
            p.pos0 += take;
        }
    layout.padding = 0;
    for (size_t q = 0; q < tokens.size(); ++q)
        if (tokens[q] < rows) {
            layout.ranks[q].push_back({{-1, rows - tokens[q]}, 0, -1});
            layout.padding += rows - tokens[q];
        }
}

DocZigzag fitted_zigzag(const Row& row, int64_t T, int ring) {
    std::vector<Segment> docs;
    for (const Segment& seg : row)
        if (seg.first >= 0) docs.push_back(seg);
    DocZigzag z = doc_zigzag(docs, ring, split_above(T, ring));
    fit_rows(z, T / ring);
    return z;
}

std::vector<DocBlock> doc_blocks(const DocZigzag& layout, int q_rank, int k_rank) {
    const std::vector<DocPiece>& qs = layout.ranks.at(size_t(q_rank));
    const std::vector<DocPiece>& ks = layout.ranks.at(size_t(k_rank));
    std::vector<DocBlock> out;
    int64_t q_row = 0;
    for (const DocPiece& q : qs) {
        int64_t k_row = 0;
        for (const DocPiece& k : ks) {
            // The query piece's last position sees the key piece's first.
            if (q.seg.first >= 0 && k.seg.first >= 0 && q.doc == k.doc &&
                k.pos0 <= q.pos0 + q.seg.len - 1)
                out.push_back({q_row, k_row, q.seg.len, k.seg.len, q.pos0, k.pos0});
            k_row += k.seg.len;
        }
        q_row += q.seg.len;
    }
    return out;
}

DocOrder doc_order(const DocZigzag& layout) {
    struct Where {
        int rank;
        int64_t row;
        const DocPiece* piece;
    };
    std::vector<std::vector<Where>> by_doc;
    std::vector<Where> fitted_padding;  // fit_rows' (doc -1): each a document after the others
    DocOrder out;
    for (size_t r = 0; r < layout.ranks.size(); ++r) {
        int64_t row = 0;
        out.slots.emplace_back();
        for (const DocPiece& p : layout.ranks[r]) {
            if (p.doc < 0) {
                fitted_padding.push_back({int(r), row, &p});
            } else {
                if (size_t(p.doc) >= by_doc.size()) by_doc.resize(size_t(p.doc) + 1);
                by_doc[size_t(p.doc)].push_back({int(r), row, &p});
            }
            out.slots.back().resize(size_t(row + p.seg.len));
            row += p.seg.len;
        }
    }
    for (const Where& w : fitted_padding) by_doc.push_back({w});
    int64_t at = 0;
    for (std::vector<Where>& pieces : by_doc) {
        // Real pieces by position, then the padding.
        std::sort(pieces.begin(), pieces.end(), [](const Where& a, const Where& b) {
            return std::pair(a.piece->seg.first < 0, a.piece->pos0) <
                   std::pair(b.piece->seg.first < 0, b.piece->pos0);
        });
        for (size_t j = 0; j < pieces.size(); ++j) {
            const Where& w = pieces[j];
            const bool pad = w.piece->seg.first < 0;
            if (j == 0 || (pad && pieces[j - 1].piece->seg.first >= 0))
                out.cu_seqlens.push_back(at);
            for (int64_t i = 0; i < w.piece->seg.len; ++i)
                out.slots[size_t(w.rank)][size_t(w.row + i)] = at++;
        }
    }
    out.cu_seqlens.push_back(at);
    return out;
}

RankWork rank_work(const DocZigzag& layout) {
    RankWork w{std::vector<int64_t>(size_t(layout.ring), 0),
               std::vector<double>(size_t(layout.ring), 0), 0};
    for (size_t r = 0; r < layout.ranks.size(); ++r)
        for (const DocPiece& p : layout.ranks[r]) {
            if (p.seg.first < 0) {
                w.padding += p.seg.len;
                continue;
            }
            w.tokens[r] += p.seg.len;
            w.squares[r] += piece_work(p.pos0, p.pos0 + p.seg.len);
        }
    return w;
}

RankWork rank_work_per_document(const RankRows& layout, int ring) {
    WEFT_CHECK(layout.ring == 1 && layout.rows_per_rank > 0,
               "internal: per-document work of rows already split over a ring of {}", layout.ring);
    const size_t ranks = layout.rows.size() / size_t(layout.rows_per_rank), R = size_t(ring);
    RankWork w{std::vector<int64_t>(ranks * R, 0), std::vector<double>(ranks * R, 0), 0};
    int64_t T = 0;
    for (const Segment& s : layout.rows.at(0)) T += s.len;
    for (size_t j = 0; j < layout.rows.size(); ++j) {
        const RankWork row = rank_work(fitted_zigzag(layout.rows[j], T, ring));
        const size_t first_unit = j / size_t(layout.rows_per_rank) * R;
        for (size_t u = 0; u < R; ++u) {
            w.tokens[first_unit + u] += row.tokens[u];
            w.squares[first_unit + u] += row.squares[u];
        }
        w.padding += row.padding;
    }
    return w;
}

}  // namespace weft::data
