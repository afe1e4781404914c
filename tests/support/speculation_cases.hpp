#pragma once
// The greedy case the speculation tests share: a prompt that repeats itself (so that guesses are
// found) and 70 tokens, past a model window of 48 (so that the sliding window's rebuild is
// crossed too).
#include <cstdint>
#include <vector>

#include "weft/model/generate.hpp"

namespace weft::test {

inline std::vector<int32_t> repeating_prompt() {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back(int32_t(3 + i % 5));
    return prompt;
}

inline model::SampleOptions greedy_past_window() {
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = 70;
    return o;
}

}  // namespace weft::test
