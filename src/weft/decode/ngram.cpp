#include "weft/decode/ngram.hpp"

#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::decode {

void NgramOptions::validate() const {
    WEFT_CHECK(min_n >= 1 && max_n >= min_n,
               "--ngram-min {} and --ngram-max {} must satisfy 1 <= min <= max", min_n, max_n);
    WEFT_CHECK(max_tokens >= 0 && max_tokens <= 64,
               "--spec-tokens must be in [0, 64] (the tokens guessed per step; 0: the proposer's "
               "default), got {}",
               max_tokens);
}

TokenTree propose_ngram(std::span<const int32_t> ctx, const NgramOptions& o) {
    const int64_t L = int64_t(ctx.size());
    for (int n = std::min<int64_t>(o.max_n, L - 1); n >= o.min_n; --n) {
        std::span<const int32_t> suffix = ctx.subspan(size_t(L - n));
        // The latest occurrence that ends before the suffix itself and has a token after it.
        for (int64_t start = L - n - 1; start >= 0; --start) {
            if (!std::equal(suffix.begin(), suffix.end(), ctx.begin() + start)) continue;
            const int64_t from = start + n;
            const int64_t count = std::min<int64_t>(o.max_tokens, L - from);
            return TokenTree::chain(ctx.subspan(size_t(from), size_t(count)));
        }
    }
    return {};
}

}  // namespace weft::decode
