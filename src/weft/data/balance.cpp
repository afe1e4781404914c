#include "weft/data/balance.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "weft/core/error.hpp"

namespace weft::data {

namespace {

// One attempt at `rows` rows a rank; none when some document fits no row left. `forced`: whether
// some document could not go to the rank the rule prefers for want of room (with more rows
// the attempt could come out more even).
std::optional<RankRows> greedy(std::span<const Segment> documents,
                               std::span<const size_t> longest_first, int ranks, int64_t T,
                               int64_t rows, bool& forced) {
    RankRows out{rows, std::vector<Row>(size_t(ranks * rows))};
    std::vector<int64_t> room(out.rows.size(), T), tokens(size_t(ranks), 0);
    std::vector<double> work(size_t(ranks), 0);
    forced = false;
    for (size_t i : longest_first) {
        const int64_t n = documents[i].len;
        auto before = [&](int a, int b) {
            return std::pair(work[size_t(a)], tokens[size_t(a)]) <
                   std::pair(work[size_t(b)], tokens[size_t(b)]);
        };
        int best_rank = -1, preferred = 0;
        size_t best_row = 0;
        for (int r = 0; r < ranks; ++r) {
            if (before(r, preferred)) preferred = r;
            if (best_rank >= 0 && !before(r, best_rank)) continue;
            // The fullest row of rank r that still holds n tokens.
            std::optional<size_t> fit;
            for (size_t j = size_t(r * rows); j < size_t((r + 1) * rows); ++j)
                if (room[j] >= n && (!fit || room[j] < room[*fit])) fit = j;
            if (fit) best_rank = r, best_row = *fit;
        }
        if (best_rank < 0) return std::nullopt;
        forced = forced || best_rank != preferred;
        out.rows[best_row].push_back(documents[i]);
        room[best_row] -= n;
        work[size_t(best_rank)] += double(n) * double(n);
        tokens[size_t(best_rank)] += n;
    }
    for (size_t j = 0; j < out.rows.size(); ++j)
        for (int64_t left = room[j]; left > 0; left -= kPaddingPiece)
            out.rows[j].push_back({-1, std::min(left, kPaddingPiece)});
    return out;
}

double ratio(double most, double least) {
    return least > 0 ? most / least : 0;
}

}  // namespace

RankRows static_rows(std::span<const Row> windows, int ranks) {
    WEFT_CHECK(ranks >= 1 && windows.size() % size_t(ranks) == 0,
               "internal: {} windows over {} ranks", windows.size(), ranks);
    return {int64_t(windows.size()) / ranks, {windows.begin(), windows.end()}};
}

RankRows balance_rows(std::span<const Row> windows, int ranks, int64_t T, int64_t row_step) {
    WEFT_CHECK(ranks >= 1 && T >= 1 && row_step >= 1 && !windows.empty() &&
                   windows.size() % size_t(ranks * row_step) == 0,
               "internal: balancing {} windows over {} ranks of rows of {} (steps of {})",
               windows.size(), ranks, T, row_step);
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
    RankRows whole{min_rows, {}};
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
    double best = rank_work(tried[0]).max_squares();
    // Then the documents: more rows let the rule place more of them where it prefers, up to
    // the count at which none is turned away, or twice the windows' rows (padding as much as
    // the data is never worth it, and it bounds the search). Kept: the layout of the fewest
    // rows within kBalanceSlack of the evenest seen.
    order.resize(documents.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return documents[a].len > documents[b].len; });
    for (int64_t rows = min_rows; rows <= 2 * min_rows; rows += row_step) {
        bool forced = false;
        std::optional<RankRows> out = greedy(documents, order, ranks, T, rows, forced);
        if (!out) continue;
        best = std::min(best, rank_work(*out).max_squares());
        tried.push_back(std::move(*out));
        if (!forced) break;
    }
    for (RankRows& out : tried)
        if (rank_work(out).max_squares() <= best * (1 + kBalanceSlack)) return std::move(out);
    fail("internal: no balanced layout");
}

RankWork rank_work(const RankRows& layout) {
    const size_t ranks = layout.rows.size() / size_t(layout.rows_per_rank);
    RankWork w{std::vector<int64_t>(ranks, 0), std::vector<double>(ranks, 0), 0};
    for (size_t j = 0; j < layout.rows.size(); ++j) {
        const size_t r = j / size_t(layout.rows_per_rank);
        for (const Segment& s : layout.rows[j]) {
            w.squares[r] += double(s.len) * double(s.len);
            (s.first < 0 ? w.padding : w.tokens[r]) += s.len;
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
