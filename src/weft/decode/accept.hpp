#pragma once
// Which guessed tokens a verify forward accepts, so that the output is what plain decoding gives:
// greedy, the same tokens; sampling, tokens distributed exactly as plain sampling's (speculative
// sampling: Leviathan et al. 2023, Chen et al. 2023; several guesses under one node as SpecInfer
// (Miao et al. 2024) tries them, each against what is left of the model's distribution).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "weft/core/philox.hpp"
#include "weft/decode/token_tree.hpp"
#include "weft/model/generate.hpp"

namespace weft::decode {

// The distribution pick_token draws from: the ids left after top-k and top-p, in decreasing
// logit order (ties by id), with their probabilities (summing to 1) at the temperature.
struct Distribution {
    std::vector<int32_t> ids;
    std::vector<double> probs;
    double prob(int32_t id) const;
};
// temperature > 0 (greedy has no distribution: accept_greedy).
Distribution sampling_distribution(std::span<const float> logits, const model::SampleOptions& o);
// The id at cumulative probability u in [0, 1).
int32_t draw(const Distribution& d, double u);

struct Verdict {
    std::vector<int> nodes;  // the accepted nodes, from a child of the root down
    int32_t next = -1;       // the token after them: the model's own choice, always one
};

// The verify forward's logits of row r (row 0 the root, row i + 1 node i).
using RowLogits = std::function<std::span<const float>(int row)>;

// Greedy: walk down while the model's argmax at a row is a child of its node, then take the
// argmax there as `next`: the tokens greedy decoding would give one step at a time.
Verdict accept_greedy(const TokenTree& tree, const RowLogits& logits);

// The proposer's distribution under a node (-1: the root) that its single child there was drawn
// from; null: the children there are fixed guesses (prompt lookup, PPD), each a point mass.
using Proposal = std::function<const Distribution*(int node)>;

// Sampling: at each node, its children in order: a child x is accepted with probability
// min(1, p(x) / q(x)) against the model's distribution p at that row (q a point mass for a fixed
// guess); on a rejection p becomes max(0, p - q) normalised and the next child is tried; when
// none is accepted `next` is drawn from what p has become. Uniform numbers come from `rng` at
// counters `counter`, `counter` + 1, ..., which the call advances.
Verdict accept_sampling(const TokenTree& tree, const RowLogits& logits,
                        const model::SampleOptions& o, const Proposal& proposal, const Philox& rng,
                        uint64_t& counter);

}  // namespace weft::decode
