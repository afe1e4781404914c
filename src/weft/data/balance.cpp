#include "weft/data/balance.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/zigzag.hpp"

namespace weft::data {

namespace {

// Where the ring's ranks hold a row of T tokens, and what a document placed in it costs each.
class RingRow {
  public:
    RingRow(int64_t T, int ring) : T_(T), ring_(ring) {
        WEFT_CHECK(ring == 1 || (ring > 1 && T % (2 * ring) == 0),
                   "internal: rows of {} over a ring of {}: not 2 x {} chunks", T, ring, ring);
        if (ring > 1) z_ = kernels::Zigzag{T, ring, T / (2 * ring)};
    }
    int size() const { return ring_; }
    int64_t chunk() const { return z_ ? z_->chunk : T_; }

    // f(rank, work, tokens) for each piece of the document [at, at + n) on one chunk: each query
    // i of the document (0-based) scores i + 1 keys, counted 2i + 1 so that a document of n
    // tokens costs n^2 in all (as the rank_work of a whole document), on its query's rank.
    template <class F>
    void shares(int64_t at, int64_t n, F f) const {
        if (!z_) return f(0, double(n) * double(n), n);
        for (int64_t lo = at; lo < at + n;) {
            const int64_t hi = std::min(at + n, (lo / z_->chunk + 1) * z_->chunk);
            const double p0 = double(lo - at), p1 = double(hi - at);
            f(int(kernels::zigzag_rank_of(*z_, lo)), p1 * p1 - p0 * p0, hi - lo);
            lo = hi;
        }
    }
    bool one_rank(int64_t at, int64_t n) const {
        return !z_ || kernels::zigzag_one_rank(*z_, at, at + n - 1);
    }

  private:
    int64_t T_;
    int ring_;
    std::optional<kernels::Zigzag> z_;
};

// Free positions [a, b) of a row.
struct Gap {
    int64_t a, b;
};

// A place for a document and how the greedy ranks it: by key(), least first.
struct Place {
    bool crosses_short = false;  // a short document over two ranks' positions (a last resort)
    double busiest = 0;          // the most work among the ranks it lands on, once placed
    bool crosses = false;        // over two ranks: their ring must carry its keys
    int64_t tokens = 0;          // the most tokens among those ranks, before
    int64_t room = 0;            // the free room it goes into (best fit: the least)
    size_t row = 0, gap = 0;
    int64_t at = 0;

    auto rank_key() const { return std::tuple(crosses_short, busiest, crosses, tokens); }
    auto key() const { return std::tuple(crosses_short, busiest, crosses, tokens, room, row, at); }
};

class Greedy {
  public:
    Greedy(int ranks, const RingRow& ring, int64_t T, int64_t rows)
        : ring_(ring),
          T_(T),
          rows_(rows),
          gaps_(size_t(ranks * rows), std::vector<Gap>{{0, T}}),
          placed_(gaps_.size()),
          work_(size_t(ranks * ring.size()), 0),
          tokens_(work_.size(), 0) {}

    // Places a document of n tokens; false when no row has room for it. `forced`: it could not
    // go where it would have on an empty row.
    bool place(const Segment& d, bool& forced) {
        std::optional<Place> best, ideal;
        const std::vector<Gap> empty{{0, T_}};
        for (size_t j = 0; j < gaps_.size(); ++j) {
            consider(d.len, j, gaps_[j], best);
            if (j % size_t(rows_) == 0) consider(d.len, j, empty, ideal);
        }
        if (!best) return false;
        forced = forced || ideal->rank_key() < best->rank_key();
        const int64_t d_rank = int64_t(best->row) / rows_;
        ring_.shares(best->at, d.len, [&](int u, double w, int64_t n) {
            work_[size_t(d_rank * ring_.size() + u)] += w;
            tokens_[size_t(d_rank * ring_.size() + u)] += n;
        });
        std::vector<Gap>& gaps = gaps_[best->row];
        const Gap g = gaps[best->gap];
        gaps.erase(gaps.begin() + std::ptrdiff_t(best->gap));
        if (best->at + d.len < g.b) gaps.push_back({best->at + d.len, g.b});
        if (g.a < best->at) gaps.push_back({g.a, best->at});
        placed_[best->row].emplace_back(best->at, d);
        return true;
    }

    // The rows, each its documents by position, what is left padding (in pieces that cross no
    // chunk's edge, so that they too stay on one rank).
    RankRows rows() {
        RankRows out{rows_, std::vector<Row>(placed_.size()), ring_.size()};
        for (size_t j = 0; j < placed_.size(); ++j) {
            std::vector<std::pair<int64_t, Segment>>& docs = placed_[j];
            std::sort(docs.begin(), docs.end(),
                      [](const auto& x, const auto& y) { return x.first < y.first; });
            int64_t at = 0;
            auto pad_to = [&](int64_t end) {
                while (at < end) {
                    const int64_t edge = (at / ring_.chunk() + 1) * ring_.chunk();
                    const int64_t n = std::min({end - at, kPaddingPiece, edge - at});
                    out.rows[j].push_back({-1, n});
                    at += n;
                }
            };
            for (const auto& [first, d] : docs) {
                pad_to(first);
                out.rows[j].push_back(d);
                at += d.len;
            }
            pad_to(T_);
        }
        return out;
    }

  private:
    // The best place for n tokens among `gaps` of row j, into `best`.
    void consider(int64_t n, size_t j, std::span<const Gap> gaps, std::optional<Place>& best) {
        const int R = ring_.size();
        const int64_t d_rank = int64_t(j) / rows_, c = ring_.chunk();
        // Positions tried in a gap: its two ends, and inside it the chunks' starts (where a
        // short document begins a slot) or, for a long document, every quarter chunk (its work
        // on each rank moves with its position).
        const int64_t step = n <= c ? c : std::max<int64_t>(1, c / 4);
        std::vector<double> add(static_cast<size_t>(R));
        for (size_t g = 0; g < gaps.size(); ++g) {
            const auto [a, b] = gaps[g];
            if (b - a < n) continue;
            std::vector<int64_t> at{a};
            if (R > 1) {
                for (int64_t x = (a / step + 1) * step; x < b - n; x += step) at.push_back(x);
                at.push_back(b - n);
            }
            for (int64_t x : at) {
                std::fill(add.begin(), add.end(), 0.0);
                ring_.shares(x, n, [&](int u, double w, int64_t) { add[size_t(u)] += w; });
                Place p;
                p.crosses = !ring_.one_rank(x, n);
                p.crosses_short = p.crosses && n <= c;
                for (int u = 0; u < R; ++u) {
                    if (add[size_t(u)] == 0) continue;  // every piece adds work: not on rank u
                    const size_t unit = size_t(d_rank * R + u);
                    p.busiest = std::max(p.busiest, work_[unit] + add[size_t(u)]);
                    p.tokens = std::max(p.tokens, tokens_[unit]);
                }
                p.room = b - a;
                p.row = j, p.gap = g, p.at = x;
                if (!best || p.key() < best->key()) best = p;
            }
        }
    }

    const RingRow& ring_;
    int64_t T_, rows_;
    std::vector<std::vector<Gap>> gaps_;                            // each row's free positions
    std::vector<std::vector<std::pair<int64_t, Segment>>> placed_;  // each row's, by position
    std::vector<double> work_;     // each (dp, ring) rank's attention work so far
    std::vector<int64_t> tokens_;  // and tokens
};

// One attempt at `rows` rows a rank; none when some document fits no row left. `forced`: whether
// some document could not go to the place the rule prefers for want of room (with more rows
// the attempt could come out more even).
std::optional<RankRows> greedy(std::span<const Segment> documents,
                               std::span<const size_t> longest_first, int ranks,
                               const RingRow& ring, int64_t T, int64_t rows, bool& forced) {
    Greedy g(ranks, ring, T, rows);
    forced = false;
    for (size_t i : longest_first)
        if (!g.place(documents[i], forced)) return std::nullopt;
    return g.rows();
}

double ratio(double most, double least) {
    return least > 0 ? most / least : 0;
}

}  // namespace

RankRows static_rows(std::span<const Row> windows, int ranks, int ring) {
    WEFT_CHECK(ranks >= 1 && ring >= 1 && windows.size() % size_t(ranks) == 0,
               "internal: {} windows over {} ranks (rings of {})", windows.size(), ranks, ring);
    return {int64_t(windows.size()) / ranks, {windows.begin(), windows.end()}, ring};
}

RankRows balance_rows(std::span<const Row> windows, int ranks, int64_t T, int64_t row_step,
                      int ring, StepCost cost) {
    WEFT_CHECK(ranks >= 1 && T >= 1 && row_step >= 1 && !windows.empty() &&
                   windows.size() % size_t(ranks * row_step) == 0,
               "internal: balancing {} windows over {} ranks of rows of {} (steps of {})",
               windows.size(), ranks, T, row_step);
    const RingRow ring_row(T, ring);
    const int64_t min_rows = int64_t(windows.size()) / ranks;
    std::vector<Segment> documents;
    for (const Row& w : windows)
        for (const Segment& d : w) {
            WEFT_CHECK(d.first >= 0 && d.len >= 1 && d.len <= T,
                       "internal: a document of {} tokens at {} for rows of {}", d.len, d.first, T);
            documents.push_back(d);
        }
    // First the windows whole, min_rows to a rank, the heaviest first to the least loaded:
    // no padding at all.
    std::vector<double> window_work(windows.size(), 0);
    for (size_t i = 0; i < windows.size(); ++i)
        for (const Segment& d : windows[i]) window_work[i] += double(d.len) * double(d.len);
    std::vector<size_t> order(windows.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return window_work[a] > window_work[b]; });
    RankRows whole{min_rows, {}, ring};
    {
        std::vector<std::vector<Row>> held(static_cast<size_t>(ranks));
        std::vector<double> work(size_t(ranks), 0);
        for (size_t i : order) {
            int best = -1;
            for (int r = 0; r < ranks; ++r)
                if (int64_t(held[size_t(r)].size()) < min_rows &&
                    (best < 0 || work[size_t(r)] < work[size_t(best)]))
                    best = r;
            held[size_t(best)].push_back(windows[i]);
            work[size_t(best)] += window_work[i];
        }
        for (auto& h : held) whole.rows.insert(whole.rows.end(), h.begin(), h.end());
    }
    std::vector<RankRows> tried{std::move(whole)};
    // Then the documents: more rows let the rule place more of them where it prefers, up to
    // the count at which none is turned away, or twice the windows' rows (padding as much as
    // the data is never worth it, and it bounds the search).
    order.resize(documents.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return documents[a].len > documents[b].len; });
    for (int64_t rows = min_rows; rows <= 2 * min_rows; rows += row_step) {
        bool forced = false;
        std::optional<RankRows> out = greedy(documents, order, ranks, ring_row, T, rows, forced);
        if (!out) continue;
        tried.push_back(std::move(*out));
        if (!forced) break;
    }
    // Under a ring, whole windows keep documents across chunk edges: every micro-batch turns
    // the ring, and the rows' zigzag leaves the ring's ranks uneven however the windows are
    // dealt. So they are kept only when no placement fits.
    if (ring > 1 && tried.size() > 1) tried.erase(tried.begin());
    // Kept: the fewest rows whose busiest rank's predicted step exceeds the least predicted one
    // by at most kBalanceSlack of that one's attention (attention alone: within kBalanceSlack
    // of the evenest).
    std::vector<double> busiest, step;
    for (const RankRows& out : tried) {
        busiest.push_back(cost.per_square * rank_work(out).max_squares());
        step.push_back(busiest.back() +
                       cost.per_token * double(out.rows_per_rank * T) / double(ring));
    }
    const size_t least = size_t(std::min_element(step.begin(), step.end()) - step.begin());
    for (size_t i = 0; i < tried.size(); ++i)
        if (step[i] <= step[least] + kBalanceSlack * busiest[least]) return std::move(tried[i]);
    fail("internal: no balanced layout");
}

RankWork rank_work(const RankRows& layout) {
    const size_t ranks = layout.rows.size() / size_t(layout.rows_per_rank), R = size_t(layout.ring);
    RankWork w{std::vector<int64_t>(ranks * R, 0), std::vector<double>(ranks * R, 0), 0};
    int64_t T = 0;
    for (const Segment& s : layout.rows.at(0)) T += s.len;
    const RingRow ring(T, layout.ring);
    for (size_t j = 0; j < layout.rows.size(); ++j) {
        const size_t first_unit = j / size_t(layout.rows_per_rank) * R;
        int64_t at = 0;
        for (const Segment& s : layout.rows[j]) {
            ring.shares(at, s.len, [&](int u, double work, int64_t n) {
                w.squares[first_unit + size_t(u)] += work;
                (s.first < 0 ? w.padding : w.tokens[first_unit + size_t(u)]) += n;
            });
            at += s.len;
        }
    }
    return w;
}

double RankWork::tokens_ratio() const {
    const auto [lo, hi] = std::minmax_element(tokens.begin(), tokens.end());
    return ratio(double(*hi), double(*lo));
}

double RankWork::squares_ratio() const {
    const auto [lo, hi] = std::minmax_element(squares.begin(), squares.end());
    return ratio(*hi, *lo);
}

double RankWork::max_squares() const {
    return *std::max_element(squares.begin(), squares.end());
}

}  // namespace weft::data
