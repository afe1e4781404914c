#include "weft/decode/accept.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "weft/core/error.hpp"
#include "weft/kernels/softmax_rows.hpp"

namespace weft::decode {

double Distribution::prob(int32_t id) const {
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == id) return probs[i];
    return 0;
}

Distribution sampling_distribution(std::span<const float> logits, const model::SampleOptions& o) {
    // pick_token's candidates, so that drawing here is drawing there.
    model::SamplingWeights w = model::sampling_weights(logits, o);
    for (double& p : w.weights) p /= w.sum;
    return {std::move(w.ids), std::move(w.weights)};
}

int32_t draw(const Distribution& d, double u) {
    double acc = 0;
    for (size_t i = 0; i < d.probs.size(); ++i) {
        acc += d.probs[i];
        if (u < acc) return d.ids[i];
    }
    // Rounding left the sum a little under 1: the last id with any probability.
    for (size_t i = d.probs.size(); i-- > 0;)
        if (d.probs[i] > 0) return d.ids[i];
    fail("internal: drawing from an empty distribution");
}

namespace {

int32_t argmax(std::span<const float> l) {
    return int32_t(kernels::argmax(l.data(), int64_t(l.size())));
}

std::vector<int> children(const TokenTree& t, int node) {
    std::vector<int> c;
    for (int i = 0; i < t.size(); ++i)
        if (t.parents[size_t(i)] == node) c.push_back(i);
    return c;
}

// p := max(0, p - q) normalised; q a point mass on `id` when null.
void subtract(Distribution& p, const Distribution* q, int32_t id) {
    // q by id: a draft's q spans the vocabulary, and looking each id up in it would be V^2.
    std::vector<double> dense;
    if (q && !q->ids.empty()) {
        dense.assign(size_t(*std::max_element(q->ids.begin(), q->ids.end())) + 1, 0.0);
        for (size_t i = 0; i < q->ids.size(); ++i) dense[size_t(q->ids[i])] = q->probs[i];
    }
    double sum = 0;
    for (size_t i = 0; i < p.ids.size(); ++i) {
        const size_t x = size_t(p.ids[i]);
        const double qi = q ? (x < dense.size() ? dense[x] : 0.0) : (p.ids[i] == id ? 1.0 : 0.0);
        sum += p.probs[i] = std::max(0.0, p.probs[i] - qi);
    }
    // p <= q everywhere leaves nothing; only a guess p gave no chance at all can be rejected
    // then, so there is always some mass left where it matters.
    if (sum > 0)
        for (double& x : p.probs) x /= sum;
}

}  // namespace

Verdict accept_greedy(const TokenTree& tree, const RowLogits& logits) {
    Verdict v;
    for (int node = -1;;) {
        const int32_t t = argmax(logits(node + 1));
        const int next = tree.child(node, t);
        if (next < 0) {
            v.next = t;
            return v;
        }
        v.nodes.push_back(next);
        node = next;
    }
}

Verdict accept_sampling(const TokenTree& tree, const RowLogits& logits,
                        const model::SampleOptions& o, const Proposal& proposal, const Philox& rng,
                        uint64_t& counter) {
    Verdict v;
    for (int node = -1;;) {
        Distribution p = sampling_distribution(logits(node + 1), o);
        const Distribution* q = proposal ? proposal(node) : nullptr;
        const std::vector<int> cs = children(tree, node);
        WEFT_CHECK(!q || cs.size() <= 1,
                   "internal: a drawn guess must be its node's only child, got {}", cs.size());
        int accepted = -1;
        for (int c : cs) {
            const int32_t x = tree.tokens[size_t(c)];
            const double px = p.prob(x), qx = q ? q->prob(x) : 1.0;
            const double u = rng.uniform(counter++);
            if (qx > 0 && u * qx < px) {  // u < min(1, p / q)
                accepted = c;
                break;
            }
            subtract(p, q, x);
        }
        if (accepted < 0) {
            v.next = draw(p, rng.uniform(counter++));
            return v;
        }
        v.nodes.push_back(accepted);
        node = accepted;
    }
}

}  // namespace weft::decode
