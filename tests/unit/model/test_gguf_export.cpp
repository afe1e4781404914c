// What `weft export --format gguf` refuses, each by name, before any weight is read: models
// llama.cpp's gpt2, llama and qwen2 architectures do not compute as weft does, and a tokenizer
// larger than the model's vocabulary. (That the files llama.cpp loads evaluate alike is
// tests/cli/gguf.sh.)
#include <gtest/gtest.h>

#include <string>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/model/config.hpp"
#include "weft/model/gguf_export.hpp"

namespace weft::model {
namespace {

using test::error_of;

const GgufBpeVocab kVocab{std::vector<std::string>(50257, "x"), {}, 50256};

std::string refusal(const ModelConfig& cfg, const GgufBpeVocab& vocab = kVocab) {
    return error_of([&] { check_gguf_export(cfg, vocab); });
}

TEST(GgufExport, AcceptsEveryFamily) {
    for (const char* preset : {"tiny", "llama-tiny", "moe-tiny", "qwen2-tiny", "llama-3.1-405b"})
        EXPECT_NO_THROW(check_gguf_export(model_preset(preset), kVocab)) << preset;
}

TEST(GgufExport, Refusals) {
    ModelConfig moe = model_preset("moe-tiny");
    moe.moe_renormalize = false;
    EXPECT_NE(refusal(moe).find("without renormalising its top-2 weights"), std::string::npos);
    moe = model_preset("moe-tiny");
    moe.n_shared_experts = 1;
    EXPECT_NE(refusal(moe).find("1 shared experts"), std::string::npos);
    ModelConfig biased = model_preset("llama-tiny");
    biased.qkv_bias = true;
    EXPECT_NE(refusal(biased).find("q/k/v biases"), std::string::npos);
    ModelConfig qwen_moe = model_preset("qwen2-tiny");
    qwen_moe.n_experts = 4;
    EXPECT_NE(refusal(qwen_moe).find("a qwen2 model with 4 experts"), std::string::npos);
    const GgufBpeVocab big{std::vector<std::string>(50258, "x"), {}, 50256};
    EXPECT_EQ(refusal(model_preset("llama-tiny"), big),
              "GGUF export: the tokenizer has 50258 tokens, more than the model's vocabulary of "
              "50257");
}

}  // namespace
}  // namespace weft::model
