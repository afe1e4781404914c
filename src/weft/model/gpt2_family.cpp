#include "weft/model/gpt2_family.hpp"

#include <cmath>

#include "weft/ckpt/hf_config.hpp"
#include "weft/core/error.hpp"
#include "weft/model/gpt2.hpp"

namespace weft::model {

namespace {

ModelConfig preset(int64_t layers, int64_t heads, int64_t width, int64_t positions = 1024) {
    ModelConfig c;
    c.n_layer = layers, c.n_head = heads, c.n_embd = width, c.n_positions = positions;
    return c;
}

void validate(const ModelConfig& c, const std::string& where) {
    WEFT_CHECK(c.n_embd % c.n_head == 0,
               "{}: n_embd {} is not divisible by n_head {} (each head needs an equal share of the "
               "width)",
               where, c.n_embd, c.n_head);
    WEFT_CHECK(c.tie_embeddings && c.n_kv_head == 0 && c.n_inner == 0 && c.n_head_dim == 0 &&
                   c.rope_scaling.type.empty(),
               "{}: GPT-2 has a tied head, as many key/value heads as heads, a 4x MLP and no "
               "rotary embedding; untied heads, n_kv_head, n_inner, head_dim and rope_scaling "
               "are Llama's",
               where);
}

void declare(const ModelConfig& cfg, ParamDeclarer& d) {
    const int64_t C = cfg.n_embd, L = cfg.n_layer;
    // GPT-2's scaled initialisation of the projections into the residual stream.
    const float std_base = 0.02f, std_resid = 0.02f / std::sqrt(2.0f * float(L));
    const Init N = Init::normal, Z = Init::zeros, O = Init::ones;
    WEFT_CHECK(cfg.n_head % d.tp() == 0,
               "{} attention heads do not split over tensor-parallel degree {}: the head count "
               "must be a multiple of --tp",
               cfg.n_head, d.tp());
    d.tensor("wte.weight", {cfg.vocab_size, C}, N, std_base, kColumn, cfg.padded_vocab());
    d.tensor("wpe.weight", {cfg.n_positions, C}, N, std_base);
    d.end_unit();
    for (int64_t l = 0; l < L; ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        d.tensor(h + "ln_1.weight", {C}, O, 0);
        d.tensor(h + "ln_1.bias", {C}, Z, 0);
        // qkv is [q; k; v], and a rank keeps its heads of each (Megatron's layout): 3 blocks.
        d.tensor(h + "attn.c_attn.weight", {3 * C, C}, N, std_base, {0, 3});
        d.tensor(h + "attn.c_attn.bias", {3 * C}, Z, 0, {0, 3});
        d.tensor(h + "attn.c_proj.weight", {C, C}, N, std_resid, kRow);
        d.tensor(h + "attn.c_proj.bias", {C}, Z, 0);
        d.tensor(h + "ln_2.weight", {C}, O, 0);
        d.tensor(h + "ln_2.bias", {C}, Z, 0);
        d.tensor(h + "mlp.c_fc.weight", {4 * C, C}, N, std_base, kColumn);
        d.tensor(h + "mlp.c_fc.bias", {4 * C}, Z, 0, kColumn);
        d.tensor(h + "mlp.c_proj.weight", {C, 4 * C}, N, std_resid, kRow);
        d.tensor(h + "mlp.c_proj.bias", {C}, Z, 0);
        d.end_unit();
    }
    d.tensor("ln_f.weight", {C}, O, 0);
    d.tensor("ln_f.bias", {C}, Z, 0);
    d.end_unit();
}

std::unique_ptr<Model> make(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp, bool sp) {
    return std::make_unique<Gpt2>(cfg, shard, tp, sp);
}

std::vector<LinearShape> layer_linears(const ModelConfig& cfg) {
    const int64_t C = cfg.n_embd;
    // The inputs kept as bf16 under --dtype bf16: ln1, atty, ln2 and fch_gelu (gpt2.hpp; atty
    // stays fp32 under context parallelism, which this operand count leaves aside). c_fc's
    // output gradient comes rounded from the GELU's backward.
    return {{"attn.c_attn", 3 * C, C, true, true},
            {"attn.c_proj", C, C, false, true},
            {"mlp.c_fc", 4 * C, C, true, true, true},
            {"mlp.c_proj", C, 4 * C, false, true}};
}

ActivationTerms korthikanti_terms(const ModelConfig& cfg) {
    // Korthikanti et al. Table 2: sbh(10 + 24/t) + 5as²b/t (attention with dropout).
    const double h = double(cfg.n_embd);
    // fp8: the QKV and MLP-up inputs (two LayerNorm outputs, 2h each) and the MLP-down input
    // (the GELU output, 8h); the projection's input is also FlashAttention's kept output.
    return {10 * h, 24 * h, 5 * double(cfg.n_head), 4 * h, 8 * h, h, 0};
}

ModelConfig read_hf(const std::filesystem::path& dir) {
    ckpt::HfGpt2Config h = ckpt::read_hf_config(dir);
    ModelConfig c;
    c.n_embd = h.n_embd;
    c.n_layer = h.n_layer;
    c.n_head = h.n_head;
    c.n_positions = h.n_positions;
    c.vocab_size = h.vocab_size;
    c.ln_eps = float(h.layer_norm_epsilon);
    c.validate((dir / "config.json").string());
    return c;
}

void write_hf(const std::filesystem::path& dir, const ModelConfig& cfg) {
    ckpt::write_hf_config(dir, {cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_positions,
                                cfg.vocab_size, cfg.ln_eps_decimal()});
}

HfTensorName hf_tensor(const ModelConfig&, const ParamSpec& p) {
    // Hugging Face's GPT-2 uses Conv1D for these, storing the weight as [in, out].
    auto ends = [&](const std::string& suffix) {
        return p.name.size() >= suffix.size() &&
               p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const bool conv1d = ends("attn.c_attn.weight") || ends("attn.c_proj.weight") ||
                        ends("mlp.c_fc.weight") || ends("mlp.c_proj.weight");
    return {"transformer." + p.name, conv1d};
}

}  // namespace

const Family& gpt2_family() {
    static const Family f{
        "gpt2",
        {{"gpt2", "GPT2LMHeadModel"}},
        {{"tiny", preset(2, 4, 64, 256)},
         {"gpt2", preset(12, 12, 768)},
         {"gpt2-medium", preset(24, 16, 1024)},
         {"gpt2-large", preset(36, 20, 1280)},
         {"gpt2-xl", preset(48, 25, 1600)}},
        validate,
        declare,
        make,
        Gpt2Activations::floats,
        [](const ModelConfig& cfg, int64_t B, int64_t T, int tp, bool sp) {
            return Gpt2::scratch_floats(cfg, B, T, tp, sp);
        },
        Gpt2::row_floats,
        layer_linears,
        korthikanti_terms,
        read_hf,
        write_hf,
        hf_tensor,
        // GPT2Attention's causal-mask buffers, saved by older transformers; the head is tied.
        {".attn.bias", ".attn.masked_bias", "lm_head.weight"},
    };
    return f;
}

}  // namespace weft::model
