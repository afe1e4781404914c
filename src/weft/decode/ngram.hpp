#pragma once
// Prompt lookup ("aggressive decoding", Saxena's prompt-lookup decoding): the guess is what
// followed the last occurrence of the context's final n tokens earlier in the context, for the
// longest n from max_n down to min_n that occurs. No extra model: text that repeats its prompt
// (code, summaries, edits) is guessed well, and a wrong guess costs only the verify's extra rows.
#include <cstdint>
#include <span>

#include "weft/decode/token_tree.hpp"

namespace weft::decode {

struct NgramOptions {
    int min_n = 1, max_n = 4;  // lengths of the suffix looked up
    int max_tokens = 0;        // most tokens guessed; 0: the proposer's default (SpecOptions)

    void validate() const;
};

// The chain of up to o.max_tokens tokens that followed the latest earlier occurrence of the
// context's longest suffix of min_n .. max_n tokens; empty when none occurs.
TokenTree propose_ngram(std::span<const int32_t> context, const NgramOptions& o);

}  // namespace weft::decode
