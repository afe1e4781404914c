#pragma once
// Every model family at test size, for tests parameterised over (family preset, bf16): the
// presets, a small configuration of each (Qwen2's packed q/k/v bias wants a head size of 16),
// and the gtest name of a case.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "weft/model/config.hpp"
#include "weft/model/family.hpp"

namespace weft::test {

inline auto family_presets() {
    return ::testing::Values("tiny", "llama-tiny", "qwen2-tiny", "moe-tiny");
}

inline model::ModelConfig small_family_config(const std::string& preset, int64_t vocab,
                                              int64_t positions, int64_t layers) {
    model::ModelConfig c = model::model_preset(preset);
    c.vocab_size = vocab;
    c.n_positions = positions;
    c.n_layer = layers;
    c.n_head = 4;
    if (c.n_kv_head > 0) c.n_kv_head = 2;
    if (c.qkv_bias) c.n_head = 2, c.n_kv_head = 1;
    c.n_embd = 32;
    if (c.n_inner > 0) c.n_inner = 48;
    return c;
}

// "llama_tiny_bf16" for the case ("llama-tiny", true).
inline std::string family_case_name(
    const ::testing::TestParamInfo<std::tuple<std::string, bool>>& i) {
    std::string n = std::get<0>(i.param);
    for (char& ch : n)
        if (ch == '-') ch = '_';
    return n + (std::get<1>(i.param) ? "_bf16" : "_fp32");
}

}  // namespace weft::test
