// The one registry of Hugging Face models: a directory's config.json resolves to the family that
// lists its model_type (or, without one, its architectures class); a mismatch of the two, a known
// architecture weft does not compute, and an unknown one are each one clear error.
#include <gtest/gtest.h>

#include <string>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/model/family.hpp"

namespace weft::model {
namespace {

using test::error_of;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

std::string family_name(const std::string& type, const std::string& arch) {
    return family_for_hf({type, arch}, "c.json").name;
}

TEST(FamilyForHf, ResolvesByTypeOrArchitecture) {
    EXPECT_EQ(family_name("gpt2", "GPT2LMHeadModel"), "gpt2");
    EXPECT_EQ(family_name("llama", ""), "llama");
    EXPECT_EQ(family_name("mixtral", "MixtralForCausalLM"), "llama");
    // Without model_type the architecture decides.
    EXPECT_EQ(family_name("", "LlamaForCausalLM"), "llama");
    EXPECT_EQ(family_name("", "GPT2LMHeadModel"), "gpt2");
    // Another head on a known body is the reader's to refuse (its tensors differ).
    EXPECT_EQ(family_name("llama", "LlamaForSequenceClassification"), "llama");
}

TEST(FamilyForHf, Refusals) {
    std::string e = error_of([] { family_name("mistral", ""); });
    EXPECT_TRUE(contains(e,
                         "c.json: model_type \"mistral\" is not supported: Mistral uses "
                         "sliding-window attention"))
        << e;
    EXPECT_TRUE(contains(e, "weft supports \"gpt2\", \"llama\", \"mixtral\"")) << e;
    e = error_of([] { family_name("gemma", ""); });
    EXPECT_TRUE(contains(e,
                         "c.json: model_type \"gemma\" is not supported (weft supports "
                         "\"gpt2\", \"llama\", \"mixtral\""))
        << e;
    e = error_of([] { family_name("", ""); });
    EXPECT_TRUE(contains(e, "c.json has no \"model_type\"")) << e;
    e = error_of([] { family_name("gpt2", "LlamaForCausalLM"); });
    EXPECT_TRUE(contains(e, "model_type is \"gpt2\" but architectures is [\"LlamaForCausalLM\"]"))
        << e;
}

}  // namespace
}  // namespace weft::model
