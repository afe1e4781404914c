#pragma once
// The shape of a sparse tree of guesses (Medusa, Cai et al. 2024; Parallel Prompt Decoding, Chen
// et al. 2024). When a proposer ranks its candidates for each depth once, whatever is guessed
// before them (PPD's prompt rows all read the same kept text), a node is a path of ranks: rank
// r1 at depth 1, under it rank r2 at depth 2, and so on. With acc[d][r] the measured share of
// steps whose model token at depth d + 1 was the candidate of rank r, a path is kept with about
// the product of its ranks' rates, and the expected number of kept guesses is the sum of that
// over the tree's nodes: the best tree of n nodes holds the n paths of highest product.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/decode/token_tree.hpp"

namespace weft::decode {

// acc[d][r]: how often the candidate of rank r at depth d + 1 was the model's own token.
using Acceptance = std::vector<std::vector<double>>;

struct TreeShape {
    std::vector<int> parents;  // -1: under the root; a parent comes before its children
    std::vector<int> ranks;    // the candidate's rank at the node's depth

    int size() const { return int(parents.size()); }
    int depth(int node) const;
    int max_depth() const;
    // Candidates a depth it needs: 1 + its highest rank.
    int width() const;
    // n guesses in a row, each its depth's best candidate: the chain a proposer guesses alone.
    static TreeShape chain(int n);
    // The tree of the candidates `ranked[d]` (depth d + 1's, best first): each node holds its
    // rank's candidate at its depth. A node past the depths or ranks given is left out with the
    // nodes under it.
    TokenTree fill(const std::vector<std::vector<int32_t>>& ranked) const;
};

// The `nodes` paths of highest product of `acc` at most `max_depth` deep (fewer when fewer have
// any chance), best first, so that every prefix of the result is the best tree of its size.
// Ties go to the path found first (the shallower, then the lower ranks).
TreeShape choose_tree(const Acceptance& acc, int nodes, int max_depth);

// The candidates of `n` rows from `first` of `logits` (rows `vocab` apart, the first V ids
// sampled): per row the `width` most likely ids, best first (ties by id, as pick_token's
// greedy choice), none a shortlist left out (logit -inf).
std::vector<std::vector<int32_t>> ranked_candidates(std::span<const float> logits, int64_t first,
                                                    int64_t n, int64_t vocab, size_t V, int width);

// The rates assumed when none were measured: rank r at depth d + 1 kept at 0.5^(d+1) / (r + 1),
// a guess that a better rank and a shallower depth are kept more often (`depths` x `width`).
Acceptance default_acceptance(int depths, int width);

}  // namespace weft::decode
