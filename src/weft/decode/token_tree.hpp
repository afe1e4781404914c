#pragma once
// A tree of guessed tokens, verified in one forward (docs/decoding.md). Node i holds a token and
// its parent: -1 for a child of the root, the last token the model has chosen but not yet read.
// Parents come before their children, so a node's ancestors are all earlier nodes, and a chain
// (the usual guess) is the tree whose node i has parent i - 1.
//
// The verify forward runs the root and the nodes as rows 0 .. n: row 0 at the position after the
// context, a node at that position plus its depth. Each row attends to the whole context and to
// the rows on its path from the root (its ancestors and itself): exactly the keys the same token
// would see if it had been decoded one step at a time along that path.
#include <cstdint>
#include <span>
#include <vector>

namespace weft::decode {

struct TokenTree {
    std::vector<int32_t> tokens;
    std::vector<int> parents;

    int size() const { return int(tokens.size()); }
    bool empty() const { return tokens.empty(); }
    // Adds a node under `parent` (-1: the root) and returns its index.
    int add(int parent, int32_t token);
    // The node under `parent` holding `token`, or -1.
    int child(int parent, int32_t token) const;
    // A chain of tokens under the root.
    static TokenTree chain(std::span<const int32_t> tokens);

    // Keeps the first n nodes (still a tree: parents come first), as many as there are slots.
    void truncate(int64_t n);
    // The nodes at most `depth` deep.
    TokenTree within(int depth) const;
    // Depth of node i: 1 for a child of the root.
    int depth(int node) const;
    // The verify forward's rows, root first: row r's position offset from the root's (0 for the
    // root, the depth for a node) and, for every row, the rows it attends to among rows 0 .. r in
    // increasing order (its path from the root, itself included).
    std::vector<int> row_offsets() const;
    std::vector<std::vector<int>> row_paths() const;
};

}  // namespace weft::decode
