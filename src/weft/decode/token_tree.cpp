#include "weft/decode/token_tree.hpp"

#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::decode {

int TokenTree::add(int parent, int32_t token) {
    WEFT_CHECK(parent >= -1 && parent < size(),
               "internal: a guessed token's parent {} is not a node of a tree of {}", parent,
               size());
    tokens.push_back(token);
    parents.push_back(parent);
    return size() - 1;
}

int TokenTree::child(int parent, int32_t token) const {
    for (int i = 0; i < size(); ++i)
        if (parents[size_t(i)] == parent && tokens[size_t(i)] == token) return i;
    return -1;
}

TokenTree TokenTree::chain(std::span<const int32_t> ts) {
    TokenTree t;
    for (size_t i = 0; i < ts.size(); ++i) t.add(int(i) - 1, ts[i]);
    return t;
}

void TokenTree::truncate(int64_t n) {
    if (n >= size()) return;
    tokens.resize(size_t(std::max<int64_t>(n, 0)));
    parents.resize(tokens.size());
}

TokenTree TokenTree::within(int max_depth) const {
    TokenTree t;
    std::vector<int> at(size_t(size()), -1);  // node -> its node in t
    for (int i = 0; i < size(); ++i) {
        const int p = parents[size_t(i)];
        if (depth(i) <= max_depth)
            at[size_t(i)] = t.add(p < 0 ? -1 : at[size_t(p)], tokens[size_t(i)]);
    }
    return t;
}

int TokenTree::depth(int node) const {
    int d = 0;
    for (; node >= 0; node = parents[size_t(node)]) ++d;
    return d;
}

std::vector<int> TokenTree::row_offsets() const {
    std::vector<int> off(size_t(size()) + 1, 0);
    for (int i = 0; i < size(); ++i) off[size_t(i) + 1] = depth(i);
    return off;
}

std::vector<std::vector<int>> TokenTree::row_paths() const {
    std::vector<std::vector<int>> paths(size_t(size()) + 1);
    paths[0] = {0};
    for (int i = 0; i < size(); ++i) {
        // Row of node i is i + 1; its parent's row is parent + 1 (the root's is 0).
        std::vector<int>& p = paths[size_t(i) + 1];
        p = paths[size_t(parents[size_t(i)] + 1)];
        p.push_back(i + 1);
    }
    return paths;
}

}  // namespace weft::decode
