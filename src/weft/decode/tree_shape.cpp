#include "weft/decode/tree_shape.hpp"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "weft/model/generate.hpp"

namespace weft::decode {

int TreeShape::depth(int node) const {
    int d = 0;
    for (; node >= 0; node = parents[size_t(node)]) ++d;
    return d;
}

int TreeShape::max_depth() const {
    int m = 0;
    for (int i = 0; i < size(); ++i) m = std::max(m, depth(i));
    return m;
}

int TreeShape::width() const {
    return ranks.empty() ? 0 : 1 + *std::max_element(ranks.begin(), ranks.end());
}

TreeShape TreeShape::chain(int n) {
    TreeShape s;
    for (int i = 0; i < n; ++i) {
        s.parents.push_back(i - 1);
        s.ranks.push_back(0);
    }
    return s;
}

TokenTree TreeShape::fill(const std::vector<std::vector<int32_t>>& ranked) const {
    TokenTree t;
    std::vector<int> at(size_t(size()), -1);  // node -> its node in t, -1 when left out
    for (int i = 0; i < size(); ++i) {
        const int p = parents[size_t(i)], d = depth(i) - 1, r = ranks[size_t(i)];
        if (p >= 0 && at[size_t(p)] < 0) continue;
        if (d >= int(ranked.size()) || r >= int(ranked[size_t(d)].size())) continue;
        at[size_t(i)] = t.add(p < 0 ? -1 : at[size_t(p)], ranked[size_t(d)][size_t(r)]);
    }
    return t;
}

TreeShape choose_tree(const Acceptance& acc, int nodes, int max_depth) {
    // A frontier of candidate paths: (product, -order found, parent node, depth, rank).
    using Path = std::tuple<double, int64_t, int, int, int>;
    std::priority_queue<Path> frontier;
    int64_t found = 0;
    auto offer = [&](double above, int parent, int depth) {
        if (depth > max_depth || depth > int(acc.size())) return;
        const std::vector<double>& rates = acc[size_t(depth - 1)];
        for (int r = 0; r < int(rates.size()); ++r)
            if (above * rates[size_t(r)] > 0)
                frontier.emplace(above * rates[size_t(r)], -found++, parent, depth, r);
    };
    TreeShape s;
    offer(1.0, -1, 1);
    while (s.size() < nodes && !frontier.empty()) {
        const auto [p, order, parent, depth, rank] = frontier.top();
        frontier.pop();
        s.parents.push_back(parent);
        s.ranks.push_back(rank);
        offer(p, s.size() - 1, depth + 1);
    }
    return s;
}

std::vector<std::vector<int32_t>> ranked_candidates(std::span<const float> logits, int64_t first,
                                                    int64_t n, int64_t vocab, size_t V, int width) {
    model::SampleOptions top;  // pick_token's order of candidates: by logit, ties by id
    top.temperature = 1;
    top.top_k = width;
    std::vector<std::vector<int32_t>> ranked;
    for (int64_t j = 0; j < n; ++j) {
        const std::span<const float> l = logits.subspan(size_t((first + j) * vocab), V);
        std::vector<int32_t> ids = model::sampling_weights(l, top).ids;
        // A shortlist's other ids have logit -inf: never a candidate.
        std::erase_if(ids, [&](int32_t id) { return std::isinf(l[size_t(id)]); });
        ranked.push_back(std::move(ids));
    }
    return ranked;
}

Acceptance default_acceptance(int depths, int width) {
    Acceptance acc(size_t(std::max(depths, 0)));
    for (int d = 0; d < depths; ++d)
        for (int r = 0; r < width; ++r) acc[size_t(d)].push_back(std::pow(0.5, d + 1) / (r + 1));
    return acc;
}

}  // namespace weft::decode
