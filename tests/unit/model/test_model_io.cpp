// Hugging Face directories for every family: export, import and export again are bit-identical;
// a sharded directory (model.safetensors.index.json) loads as the single file does; the names
// are transformers'; a missing tensor is an error naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/check.hpp"
#include "support/temp_dir.hpp"
#include "weft/ckpt/hf_weights.hpp"
#include "weft/ckpt/safetensors.hpp"
#include "weft/core/buffer.hpp"
#include "weft/core/error.hpp"
#include "weft/model/family.hpp"
#include "weft/model/state_io.hpp"

using namespace weft;
using namespace weft::model;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
    TempDir() : test::TempDir("weft_model_io") {}
};

ModelConfig small(const std::string& preset, bool tied) {
    ModelConfig c = model_preset(preset);
    c.vocab_size = 300;
    c.n_layer = 2;
    if (c.family == "llama") c.tie_embeddings = tied;
    return c;
}

std::vector<float> read_all(const fs::path& dir, const ModelConfig& cfg) {
    const ParamLayout layout = build_param_layout(cfg);
    std::vector<float> out(size_t(layout.total));
    read_hf_weights(ckpt::HfWeights::open(dir), cfg, layout, out.data());
    return out;
}

// Every file of a directory, byte for byte.
std::string contents(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The model `c` with weights drawn from `seed`, exported to `dir`.
void export_model(const ModelConfig& c, const fs::path& dir, uint64_t seed) {
    const ParamLayout layout = build_param_layout(c);
    Buffer p(layout.total);
    init_params(p.data(), layout, seed);
    write_hf_model(dir, c, layout, p.data());
}

// Every tensor of a safetensors file as F32, to write again (perhaps with more, or in shards).
struct FileTensors {
    std::vector<std::vector<float>> data;
    std::vector<ckpt::TensorToWrite> tensors;
    explicit FileTensors(const fs::path& file) {
        const ckpt::SafetensorsFile st = ckpt::SafetensorsFile::open(file);
        data.reserve(st.tensors().size());
        for (const ckpt::TensorInfo& t : st.tensors()) {
            int64_t n = 1;
            for (int64_t d : t.shape) n *= d;
            data.emplace_back(size_t(n));
            st.read_f32(t.name, t.shape, data.back().data());
            tensors.push_back({t.name, t.shape, data.back().data()});
        }
    }
};

}  // namespace

class ModelIo : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(ModelIo, ExportImportExportIsBitIdentical) {
    const auto [preset, tied] = GetParam();
    TempDir tmp;
    const ModelConfig c = small(preset, tied);
    const ParamLayout layout = build_param_layout(c);
    Buffer p(layout.total);
    init_params(p.data(), layout, 9);
    write_hf_model(tmp.path / "a", c, layout, p.data());
    // The config read back is the model's, and so are the weights.
    const ModelConfig back = read_hf_model_config(tmp.path / "a");
    EXPECT_EQ(back.family, c.family);
    EXPECT_EQ(build_param_layout(back).total, layout.total);
    const std::vector<float> q = read_all(tmp.path / "a", back);
    EXPECT_EQ(0, std::memcmp(p.data(), q.data(), q.size() * sizeof(float)));
    write_hf_model(tmp.path / "b", back, layout, q.data());
    for (const char* f : {"config.json", "model.safetensors"})
        EXPECT_EQ(contents(tmp.path / "a" / f), contents(tmp.path / "b" / f)) << f;
}

TEST_P(ModelIo, ShardedDirectoryLoadsAsTheSingleFile) {
    const auto [preset, tied] = GetParam();
    TempDir tmp;
    const ModelConfig c = small(preset, tied);
    export_model(c, tmp.path / "one", 3);
    // The same tensors in shards of at most 64 KiB, with transformers' index.
    fs::create_directories(tmp.path / "shards");
    fs::copy(tmp.path / "one" / "config.json", tmp.path / "shards" / "config.json");
    const FileTensors all(tmp.path / "one" / "model.safetensors");
    ckpt::write_hf_weights(tmp.path / "shards", all.tensors, 64 << 10);
    ASSERT_TRUE(fs::exists(tmp.path / "shards" / "model.safetensors.index.json"));
    ASSERT_GT(ckpt::HfWeights::open(tmp.path / "shards").files().size(), 2u);
    const std::vector<float> a = read_all(tmp.path / "one", c),
                             b = read_all(tmp.path / "shards", c);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Weights the model does not read are refused by name, in one file or in shards: a config of
// fewer layers than the weights, or a tensor of another model. What transformers drops on load
// (attention-mask or rotary buffers, a tied head's copy) is dropped.
TEST_P(ModelIo, TensorsTheModelLacksAreNamed) {
    const auto [preset, tied] = GetParam();
    TempDir tmp;
    const ModelConfig c = small(preset, tied);
    export_model(c, tmp.path / "hf", 5);
    EXPECT_NO_THROW(open_hf_weights(tmp.path / "hf", c));

    const bool gpt2 = c.family == "gpt2";
    const std::string config = (tmp.path / "hf" / "config.json").string();
    ModelConfig shallower = c;
    shallower.n_layer = 1;
    std::string e = test::error_of([&] { open_hf_weights(tmp.path / "hf", shallower); });
    const std::string layer1 = gpt2 ? "'transformer.h.1." : "'model.layers.1.";
    EXPECT_NE(e.find("tensors that the model of " + config + " does not have: " + layer1),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(" more (expected exactly that model's tensors"), std::string::npos) << e;

    FileTensors all(tmp.path / "hf" / "model.safetensors");
    const std::vector<float> one(4, 1.0f);
    const std::vector<int64_t> shape = {4};
    std::vector<std::string> dropped = {gpt2 ? "transformer.h.0.attn.bias"
                                             : "model.layers.0.self_attn.rotary_emb.inv_freq"};
    if (gpt2) dropped.push_back("transformer.h.1.attn.masked_bias");
    if (tied) dropped.push_back("lm_head.weight");
    for (const std::string& name : dropped) all.tensors.push_back({name, shape, one.data()});
    for (uint64_t shard_bytes : {uint64_t(1) << 40, uint64_t(64) << 10}) {
        const fs::path dir = tmp.path / ("extra_" + std::to_string(shard_bytes));
        fs::create_directories(dir);
        fs::copy(tmp.path / "hf" / "config.json", dir / "config.json");
        ckpt::write_hf_weights(dir, all.tensors, shard_bytes);
        EXPECT_NO_THROW(open_hf_weights(dir, c)) << dir;

        std::vector<ckpt::TensorToWrite> more = all.tensors;
        more.push_back({"score.weight", shape, one.data()});
        ckpt::write_hf_weights(dir, more, shard_bytes);
        const std::string where =
            shard_bytes > (1 << 20) ? "model.safetensors" : "model.safetensors.index.json";
        e = test::error_of([&] { open_hf_weights(dir, c); });
        EXPECT_NE(e.find((dir / where).string() + " holds 1 tensor that the model of " +
                         (dir / "config.json").string() + " does not have: 'score.weight' ("),
                  std::string::npos)
            << e;
    }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelIo,
                         ::testing::Values(std::make_tuple(std::string("tiny"), true),
                                           std::make_tuple(std::string("llama-tiny"), false),
                                           std::make_tuple(std::string("llama-tiny"), true),
                                           std::make_tuple(std::string("moe-tiny"), false)),
                         [](const auto& i) {
                             std::string n = std::get<0>(i.param) +
                                             (std::get<1>(i.param) ? "_tied" : "_untied");
                             for (char& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

TEST(ModelIoLlama, HuggingFaceNamesAndMissingTensors) {
    TempDir tmp;
    const ModelConfig c = small("llama-tiny", false);
    const ParamLayout layout = build_param_layout(c);
    Buffer p(layout.total);
    init_params(p.data(), layout, 1);
    write_hf_model(tmp.path / "hf", c, layout, p.data());
    const ckpt::HfWeights w = ckpt::HfWeights::open(tmp.path / "hf");
    // LlamaForCausalLM's names, as transformers saves them.
    for (const char* n :
         {"model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
          "model.layers.0.mlp.gate_proj.weight", "model.norm.weight", "lm_head.weight"})
        EXPECT_TRUE(w.has(n)) << n;
    EXPECT_EQ(w.info("model.layers.0.self_attn.k_proj.weight").shape,
              (std::vector<int64_t>{c.kv_heads() * c.head_dim(), c.n_embd}));
    // A model with one more layer than the file holds: the missing tensor is named.
    ModelConfig deeper = c;
    deeper.n_layer = 3;
    const ParamLayout dl = build_param_layout(deeper);
    std::vector<float> q(size_t(dl.total));
    try {
        read_hf_weights(w, deeper, dl, q.data());
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'model.layers.2.input_layernorm.weight' is missing"),
                  std::string::npos)
            << e.what();
    }
}
