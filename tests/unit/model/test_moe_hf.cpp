// Mixtral directories (MixtralForCausalLM) in and out: export then import gives the same config
// and bit-identical weights, the names and shapes are transformers', and what Mixtral cannot
// express is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/check.hpp"
#include "support/temp_dir.hpp"
#include "weft/ckpt/hf_weights.hpp"
#include "weft/core/buffer.hpp"
#include "weft/model/state_io.hpp"

using namespace weft;
using namespace weft::model;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
    TempDir() : test::TempDir("weft_moe_hf") {}
};

ModelConfig small() {
    ModelConfig c = model_preset("moe-tiny");
    c.vocab_size = 300;
    c.moe_z_loss_coef = 0;  // Mixtral's config has no z-loss key
    c.moe_aux_loss_coef = 0.02;
    return c;
}

// A model of config c with initialised weights, written as a Hugging Face directory.
struct Exported {
    ParamLayout layout;
    Buffer params;
    Exported(const ModelConfig& c, const fs::path& dir)
        : layout(build_param_layout(c)), params(layout.total) {
        init_params(params.data(), layout, 9);
        write_hf_model(dir, c, layout, params.data());
    }
};

}  // namespace

TEST(MoeHf, ExportThenImportIsIdentical) {
    TempDir tmp;
    const ModelConfig c = small();
    const Exported x(c, tmp.path / "a");
    const ParamLayout& layout = x.layout;
    const Buffer& p = x.params;

    const ModelConfig back = read_hf_model_config(tmp.path / "a");
    EXPECT_EQ(back, c);
    const ckpt::HfWeights w = ckpt::HfWeights::open(tmp.path / "a");
    Buffer q(layout.total);
    q.zero();
    read_hf_weights(w, back, layout, q.data());
    EXPECT_EQ(0, std::memcmp(p.data(), q.data(), size_t(layout.total) * sizeof(float)));

    // transformers' names and shapes: one tensor per expert and projection.
    const int64_t C = c.n_embd, F = c.ffn(), E = c.n_experts;
    EXPECT_EQ(w.info("model.layers.1.block_sparse_moe.gate.weight").shape,
              (std::vector<int64_t>{E, C}));
    for (int64_t e = 0; e < E; ++e) {
        const std::string h = "model.layers.0.block_sparse_moe.experts." + std::to_string(e);
        EXPECT_EQ(w.info(h + ".w1.weight").shape, (std::vector<int64_t>{F, C}));
        EXPECT_EQ(w.info(h + ".w2.weight").shape, (std::vector<int64_t>{C, F}));
        EXPECT_EQ(w.info(h + ".w3.weight").shape, (std::vector<int64_t>{F, C}));
    }
    EXPECT_FALSE(w.has("model.layers.0.mlp.gate_proj.weight"));
    // Expert 2's down projection is the third block of weft's [E, C, F] tensor.
    const ParamSpec& w2 = layout.find("layers.0.block_sparse_moe.experts.w2.weight");
    std::vector<float> e2(size_t(C * F));
    w.read_f32("model.layers.0.block_sparse_moe.experts.2.w2.weight", std::vector<int64_t>{C, F},
               e2.data());
    EXPECT_EQ(0, std::memcmp(e2.data(), p.data() + w2.offset + 2 * C * F, e2.size() * 4));

    std::ifstream in(tmp.path / "a" / "config.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["architectures"], nlohmann::json::array({"MixtralForCausalLM"}));
    EXPECT_EQ(j["model_type"], "mixtral");
    EXPECT_EQ(j["num_local_experts"], E);
    EXPECT_EQ(j["num_experts_per_tok"], c.experts_per_token);
    EXPECT_EQ(j["router_aux_loss_coef"], 0.02);
    EXPECT_TRUE(j["sliding_window"].is_null());
}

// An expert-parallel shard reads its E/ep experts of each per-expert tensor, and nothing past
// its buffer (each rank of `weft train --model-dir --ep N`).
TEST(MoeHf, EpShardReadsItsExperts) {
    TempDir tmp;
    const ModelConfig c = small();
    const Exported x(c, tmp.path / "a");
    const ckpt::HfWeights w = ckpt::HfWeights::open(tmp.path / "a");
    const int ep = 2;
    for (int r = 0; r < ep; ++r) {
        ModelShard shard;
        shard.ep = ep, shard.ep_rank = r;
        const ParamLayout part = build_param_layout(c, shard);
        Buffer q(part.total);
        q.zero();
        read_hf_weights(w, c, part, q.data());
        for (const ParamSpec& t : part.tensors) {
            const ParamSpec& whole = x.layout.find(t.name);
            // An expert slice starts at its first expert's block of the whole tensor.
            const int64_t skip = t.expert ? t.first_row * (whole.numel_stored / whole.shape[0]) : 0;
            EXPECT_EQ(0, std::memcmp(q.data() + t.offset, x.params.data() + whole.offset + skip,
                                     size_t(t.numel_stored) * sizeof(float)))
                << t.name << " ep rank " << r;
        }
    }
}

TEST(MoeHf, MissingExpertIsNamed) {
    TempDir tmp;
    const ModelConfig c = small();
    const Exported x(c, tmp.path / "a");
    ModelConfig more = c;
    more.n_experts = 5;  // the directory holds 4
    const ParamLayout bigger = build_param_layout(more);
    Buffer q(bigger.total);
    const std::string e = test::error_of(
        [&] { read_hf_weights(ckpt::HfWeights::open(tmp.path / "a"), more, bigger, q.data()); });
    EXPECT_NE(e.find("'model.layers.0.block_sparse_moe.gate.weight' has shape [4, 64], expected "
                     "[5, 64]"),
              std::string::npos)
        << e;
}

TEST(MoeHf, RawTopKIsNotMixtral) {
    TempDir tmp;
    ModelConfig c = small();
    c.moe_renormalize = false;
    const ParamLayout layout = build_param_layout(c);
    Buffer p(layout.total);
    const std::string e =
        test::error_of([&] { write_hf_model(tmp.path / "a", c, layout, p.data()); });
    EXPECT_NE(e.find("without renormalising the top-2 weights"), std::string::npos) << e;
}

TEST(MoeHf, ConfigErrorsNameTheKeys) {
    TempDir tmp;
    const ModelConfig c = small();
    const Exported x(c, tmp.path / "a");
    const fs::path file = tmp.path / "a" / "config.json";
    nlohmann::json j;
    {
        std::ifstream in(file);
        j = nlohmann::json::parse(in);
    }
    auto error_with = [&](const char* key, const nlohmann::json& value) {
        nlohmann::json changed = j;
        changed[key] = value;
        std::ofstream(file) << changed.dump(2);
        return test::error_of([&] { read_hf_model_config(tmp.path / "a"); });
    };
    std::string e = error_with("num_experts_per_tok", 5);
    EXPECT_NE(e.find("num_experts_per_tok 5 is greater than num_local_experts 4"),
              std::string::npos)
        << e;
    e = error_with("sliding_window", 4096);
    EXPECT_NE(e.find("\"sliding_window\" is 4096, expected null (weft's attention has no "
                     "sliding window)"),
              std::string::npos)
        << e;
    e = error_with("architectures", nlohmann::json::array({"LlamaForCausalLM"}));
    EXPECT_NE(e.find("model_type is \"mixtral\" but architectures is [\"LlamaForCausalLM\"]"),
              std::string::npos)
        << e;
    e = error_with("router_aux_loss_coef", -1);
    EXPECT_NE(e.find("\"router_aux_loss_coef\" is -1, expected a number >= 0"), std::string::npos)
        << e;
}

TEST(MoeHf, SharedExpertsAreNotMixtral) {
    TempDir tmp;
    ModelConfig c = small();
    c.n_shared_experts = 1;
    const ParamLayout layout = build_param_layout(c);
    Buffer p(layout.total);
    const std::string e =
        test::error_of([&] { write_hf_model(tmp.path / "a", c, layout, p.data()); });
    EXPECT_NE(e.find("the model has 1 shared experts, which Mixtral has not"), std::string::npos)
        << e;
}
