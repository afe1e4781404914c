// Hugging Face interchange and checkpoint tensors: what is written reads back bit for bit, in
// the orientation and names transformers expects.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/check.hpp"
#include "weft/ckpt/safetensors.hpp"
#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"

using namespace weft;
using namespace weft::model;
namespace fs = std::filesystem;

namespace {
struct TempDir {
    fs::path path = fs::temp_directory_path() / ("weft-state-io-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};
ModelConfig cfg() {
    ModelConfig c;
    c.vocab_size = 100, c.n_positions = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
    return c;
}
}  // namespace

TEST(StateIo, HuggingFaceRoundTripIsExact) {
    TempDir tmp;
    ModelConfig c = cfg();
    ParamLayout layout = build_param_layout(c);
    std::vector<float> p(size_t(layout.total)), q(size_t(layout.total));
    init_params(p.data(), layout, 3);
    write_hf_model(tmp.path / "hf", c, layout, p.data());
    ModelConfig back = read_hf_model_config(tmp.path / "hf");
    EXPECT_EQ(back.n_embd, 8);
    EXPECT_EQ(back.vocab_size, 100);
    read_tensors(tmp.path / "hf" / "model.safetensors", c, layout, q.data(), Naming::hf);
    EXPECT_EQ(0, std::memcmp(p.data(), q.data(), p.size() * sizeof(float)));

    // Conv1D orientation: c_attn.weight is [in, out] = [8, 24], element [i, o] = ours [o, i].
    auto st = ckpt::SafetensorsFile::open(tmp.path / "hf" / "model.safetensors");
    const auto& info = st.at("transformer.h.0.attn.c_attn.weight");
    EXPECT_EQ(info.shape, (std::vector<int64_t>{8, 24}));
    std::vector<float> hf(8 * 24);
    st.read_f32("transformer.h.0.attn.c_attn.weight", info.shape, hf.data());
    const ParamSpec& w = layout.find("h.0.attn.c_attn.weight");
    EXPECT_EQ(hf[3 * 24 + 17], p[size_t(w.offset + 17 * 8 + 3)]);
    // The vocabulary is written unpadded.
    EXPECT_EQ(st.at("transformer.wte.weight").shape, (std::vector<int64_t>{100, 8}));
    EXPECT_EQ(st.find("lm_head.weight"), nullptr);  // tied
}

TEST(StateIo, AcceptsNamesWithoutTransformerPrefix) {
    TempDir tmp;
    ModelConfig c = cfg();
    ParamLayout layout = build_param_layout(c);
    std::vector<float> p(size_t(layout.total)), q(size_t(layout.total));
    init_params(p.data(), layout, 4);
    write_hf_model(tmp.path / "hf", c, layout, p.data());
    // Rewrite the file with GPT2Model-style names ("h.0...." instead of "transformer.h.0....").
    auto st = ckpt::SafetensorsFile::open(tmp.path / "hf" / "model.safetensors");
    std::vector<std::vector<float>> data;
    std::vector<ckpt::TensorToWrite> out;
    for (const auto& t : st.tensors()) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        data.emplace_back(size_t(n));
        st.read_f32(t.name, t.shape, data.back().data());
        out.push_back(
            {t.name.substr(std::string("transformer.").size()), t.shape, data.back().data()});
    }
    ckpt::write_safetensors(tmp.path / "plain.safetensors", out);
    read_tensors(tmp.path / "plain.safetensors", c, layout, q.data(), Naming::hf);
    EXPECT_EQ(0, std::memcmp(p.data(), q.data(), p.size() * sizeof(float)));
}

TEST(StateIo, MissingTensorAndWrongShapeAreNamed) {
    TempDir tmp;
    ModelConfig c = cfg(), bigger = cfg();
    bigger.n_embd = 16;
    ParamLayout layout = build_param_layout(c), big = build_param_layout(bigger);
    std::vector<float> p(size_t(big.total)), q(size_t(layout.total));
    write_tensors(tmp.path / "big.safetensors", bigger, big, p.data(), Naming::weft);
    try {
        read_tensors(tmp.path / "big.safetensors", c, layout, q.data(), Naming::weft);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "tensor 'wte.weight' has shape [100, 16], expected [100, 8]"),
                  std::string::npos)
            << e.what();
    }
    try {
        read_tensors(tmp.path / "big.safetensors", c, layout, q.data(), Naming::weft, "exp_avg.");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'exp_avg.wte.weight' is missing"), std::string::npos)
            << e.what();
    }
}
