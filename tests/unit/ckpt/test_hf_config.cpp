#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/hf_config.hpp"

namespace weft::ckpt {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// The config.json of the Hugging Face "gpt2" model, as published.
const char* kGpt2Config = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
  "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
  "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
  "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

TEST(HfConfig, ReadsPublishedGpt2Config) {
    TempDir dir;
    test::write_bytes(dir / "config.json", kGpt2Config);
    HfGpt2Config c = read_hf_config(dir.path());
    EXPECT_EQ(c.n_embd, 768);
    EXPECT_EQ(c.n_layer, 12);
    EXPECT_EQ(c.n_head, 12);
    EXPECT_EQ(c.n_positions, 1024);
    EXPECT_EQ(c.vocab_size, 50257);
    EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-5);
}

TEST(HfConfig, RoundTripAndTransformersKeys) {
    TempDir dir;
    HfGpt2Config c{.n_embd = 64,
                   .n_layer = 2,
                   .n_head = 4,
                   .n_positions = 128,
                   .vocab_size = 50304,
                   .layer_norm_epsilon = 1e-6};
    write_hf_config(dir.path(), c);
    HfGpt2Config r = read_hf_config(dir.path());
    EXPECT_EQ(r.n_embd, 64);
    EXPECT_EQ(r.n_layer, 2);
    EXPECT_EQ(r.n_head, 4);
    EXPECT_EQ(r.n_positions, 128);
    EXPECT_EQ(r.vocab_size, 50304);
    EXPECT_DOUBLE_EQ(r.layer_norm_epsilon, 1e-6);

    auto j = nlohmann::json::parse(test::read_bytes(dir / "config.json"));
    EXPECT_EQ(j["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
    EXPECT_EQ(j["model_type"], "gpt2");
    EXPECT_EQ(j["activation_function"], "gelu_new");
    EXPECT_EQ(j["n_ctx"], 128);
    EXPECT_TRUE(j.contains("n_inner") && j["n_inner"].is_null());
    EXPECT_EQ(j["tie_word_embeddings"], true);
    EXPECT_EQ(j["bos_token_id"], 50256);
    EXPECT_EQ(j["eos_token_id"], 50256);
    for (const char* k : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) EXPECT_EQ(j[k], 0.0) << k;

    // A test vocabulary smaller than GPT-2's keeps the special ids inside it.
    c.vocab_size = 256;
    write_hf_config(dir.path(), c);
    j = nlohmann::json::parse(test::read_bytes(dir / "config.json"));
    EXPECT_EQ(j["eos_token_id"], 255);
    EXPECT_TRUE(test::temporaries_in(dir.path()).empty());
}

// Writes kGpt2Config with `edit` applied and returns the error read_hf_config gives.
template <typename Edit>
std::string error_with(const TempDir& dir, Edit edit) {
    auto j = nlohmann::json::parse(kGpt2Config);
    edit(j);
    test::write_bytes(dir / "config.json", j.dump());
    return error_of([&] { read_hf_config(dir.path()); });
}

TEST(HfConfig, Errors) {
    TempDir dir;
    const std::string file = (dir / "config.json").string();
    std::string e = error_of([&] { read_hf_config(dir.path()); });
    EXPECT_NE(e.find("cannot read " + file), std::string::npos) << e;

    test::write_bytes(dir / "config.json", "{\"n_embd\": 768,");
    e = error_of([&] { read_hf_config(dir.path()); });
    EXPECT_NE(e.find(file + " is not valid JSON"), std::string::npos) << e;
    test::write_bytes(dir / "config.json", "[]");
    e = error_of([&] { read_hf_config(dir.path()); });
    EXPECT_NE(e.find("must hold a JSON object"), std::string::npos) << e;

    e = error_with(dir, [](auto& j) { j.erase("n_head"); });
    EXPECT_NE(e.find(file + " has no \"n_head\""), std::string::npos) << e;
    e = error_with(dir, [](auto& j) { j["n_embd"] = 768.0; });
    EXPECT_NE(e.find("\"n_embd\" is 768.0, expected a positive integer"), std::string::npos) << e;
    e = error_with(dir, [](auto& j) { j["n_layer"] = "12"; });
    EXPECT_NE(e.find("\"n_layer\" is \"12\""), std::string::npos) << e;
    e = error_with(dir, [](auto& j) { j["vocab_size"] = -5; });
    EXPECT_NE(e.find("\"vocab_size\" is -5"), std::string::npos) << e;
    e = error_with(dir, [](auto& j) { j["model_type"] = "llama"; });
    EXPECT_NE(e.find("model_type is \"llama\", expected \"gpt2\""), std::string::npos) << e;
    e = error_with(dir, [](auto& j) { j["activation_function"] = "relu"; });
    EXPECT_NE(e.find("\"activation_function\" is \"relu\", expected \"gelu_new\" or "
                     "\"gelu_pytorch_tanh\" (weft implements the tanh GELU)"),
              std::string::npos)
        << e;
    e = error_with(dir, [](auto& j) { j["n_head"] = 7; });
    EXPECT_NE(e.find("n_embd 768 is not divisible by n_head 7"), std::string::npos) << e;
    e = error_with(dir, [](auto& j) { j["layer_norm_epsilon"] = "small"; });
    EXPECT_NE(e.find("layer_norm_epsilon"), std::string::npos) << e;

    // Keys that ask for another GPT-2 than weft's are refused by name, with the reason.
    struct Refused {
        const char* key;
        nlohmann::json value;
        std::string message;
    };
    for (const auto& [key, value, message] : std::vector<Refused>{
             {"n_inner", 1024,
              file + ": \"n_inner\" is 1024, expected 3072 (weft's GPT-2 MLP is 4 x n_embd wide): "
                     "weft would run another model than transformers builds from this file"},
             {"scale_attn_weights", false,
              "\"scale_attn_weights\" is false, expected true (weft scales attention scores by "
              "1/sqrt(head_dim))"},
             {"scale_attn_by_inverse_layer_idx", true,
              "\"scale_attn_by_inverse_layer_idx\" is true, expected false"},
             {"tie_word_embeddings", false,
              "\"tie_word_embeddings\" is false, expected true (weft's GPT-2 output head is its "
              "token embedding wte)"},
             {"add_cross_attention", true, "\"add_cross_attention\" is true, expected false"}}) {
        e = error_with(dir, [&](auto& j) { j[key] = value; });
        EXPECT_NE(e.find(message), std::string::npos) << e;
    }

    // Optional keys may be absent; gelu_pytorch_tanh is the same function as gelu_new.
    auto j = nlohmann::json::parse(kGpt2Config);
    j.erase("model_type");
    j.erase("layer_norm_epsilon");
    j["activation_function"] = "gelu_pytorch_tanh";
    test::write_bytes(dir / "config.json", j.dump());
    EXPECT_EQ(read_hf_config(dir.path()).n_embd, 768);
    // Or null, or hold the value weft computes.
    for (auto edit : {+[](nlohmann::json& c) { c["n_inner"] = nullptr; },
                      +[](nlohmann::json& c) { c["n_inner"] = 3072; },
                      +[](nlohmann::json& c) { c["scale_attn_weights"] = true; },
                      +[](nlohmann::json& c) { c["tie_word_embeddings"] = nullptr; }}) {
        auto k = nlohmann::json::parse(kGpt2Config);
        edit(k);
        test::write_bytes(dir / "config.json", k.dump());
        EXPECT_EQ(read_hf_config(dir.path()).n_embd, 768) << k.dump();
    }
}

}  // namespace
}  // namespace weft::ckpt
