#include "weft/model/llama_family.hpp"

#include "weft/ckpt/hf_llama_config.hpp"
#include "weft/core/error.hpp"
#include "weft/model/llama.hpp"

namespace weft::model {

namespace {

struct Shape {
    int64_t vocab, positions, layers, heads, kv_heads, width, ffn;
    double theta;
    bool tied;
};

// A mixture of experts on a Llama shape (s.ffn is then each expert's width).
struct Moe {
    int64_t experts, per_token;
    bool renormalize;
    double aux, z;
};

ModelConfig preset(const Shape& s, float eps = 1e-5f, RopeScalingConfig scaling = {},
                   Moe moe = {0, 0, true, 0, 0}) {
    ModelConfig c;
    c.family = "llama";
    c.vocab_size = s.vocab, c.n_positions = s.positions, c.n_layer = s.layers;
    c.n_head = s.heads, c.n_kv_head = s.kv_heads, c.n_embd = s.width, c.n_inner = s.ffn;
    c.rope_theta = s.theta, c.tie_embeddings = s.tied, c.ln_eps = eps;
    c.rope_scaling = scaling;
    c.n_experts = moe.experts, c.experts_per_token = moe.per_token;
    c.moe_renormalize = moe.renormalize;
    c.moe_aux_loss_coef = moe.aux, c.moe_z_loss_coef = moe.z;
    return c;
}

void validate(const ModelConfig& c, const std::string& where) {
    const int64_t NH = c.n_head, NKV = c.kv_heads();
    WEFT_CHECK(c.n_head_dim != 0 || c.n_embd % NH == 0,
               "{}: head_dim x heads != hidden: n_embd {} is not divisible by n_head {} and no "
               "head_dim is given",
               where, c.n_embd, NH);
    WEFT_CHECK(NH % NKV == 0,
               "{}: {} key/value heads do not divide {} attention heads (grouped-query attention "
               "shares each key/value head among an equal number of query heads)",
               where, NKV, NH);
    WEFT_CHECK(c.head_dim() % 2 == 0, "{}: head_dim {} must be even for the rotary embedding",
               where, c.head_dim());
    WEFT_CHECK(c.n_embd % 16 == 0,
               "{}: weft's Llama needs a hidden size that is a multiple of 16, got {} (its q/k/v "
               "and gate/up weights are multiplied as one matrix each)",
               where, c.n_embd);
    // Under tp a rank's q and k/v biases are (NH or NKV) / tp heads; a multiple of 16 floats
    // each leaves no alignment padding between them (Llama::block).
    WEFT_CHECK(!c.qkv_bias || c.head_dim() % 16 == 0,
               "{}: head_dim {} must be a multiple of 16 for q/k/v biases (weft adds them as one "
               "packed bias)",
               where, c.head_dim());
    WEFT_CHECK(c.rope_theta > 0, "{}: rope_theta must be positive, got {}", where, c.rope_theta);
    const std::string& t = c.rope_scaling.type;
    WEFT_CHECK(t.empty() || t == "linear" || t == "llama3",
               "{}: rope_scaling type '{}' is not one weft implements; expected linear or llama3",
               where, t);
    WEFT_CHECK(t.empty() || c.rope_scaling.factor > 0, "{}: rope_scaling factor must be positive",
               where);
}

void declare(const ModelConfig& cfg, ParamDeclarer& d) {
    const int64_t C = cfg.n_embd, HS = cfg.head_dim(), NH = cfg.n_head, NKV = cfg.kv_heads();
    const int64_t F = cfg.ffn();
    // Whole heads on each rank: query and key/value heads both split over tp (Megatron would
    // replicate key/value heads when tp exceeds them; weft asks for a tp that divides them).
    WEFT_CHECK(NH % d.tp() == 0 && NKV % d.tp() == 0,
               "{} attention heads and {} key/value heads must both be multiples of --tp {}: "
               "weft splits whole query and key/value heads over tensor parallelism",
               NH, NKV, d.tp());
    // Hugging Face's Llama initialisation: every matrix N(0, 0.02), norms one.
    const float std = 0.02f;
    const Init N = Init::normal, O = Init::ones;
    const int64_t E = cfg.n_experts;
    d.tensor("embed_tokens.weight", {cfg.vocab_size, C}, N, std, kColumn, cfg.padded_vocab());
    d.end_unit();
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
        const std::string h = "layers." + std::to_string(l) + ".";
        // Qwen2's q/k/v biases (zero at first, as transformers initialises them) close the unit
        // back to back, so that they form the packed product's one [(NH + 2 NKV) HS / tp] bias
        // and leave the other tensors' indices as they are (Llama::block).
        auto end_block = [&] {
            if (cfg.qkv_bias) {
                d.tensor(h + "self_attn.q_proj.bias", {NH * HS}, Init::zeros, 0, kColumn);
                d.tensor(h + "self_attn.k_proj.bias", {NKV * HS}, Init::zeros, 0, kColumn);
                d.tensor(h + "self_attn.v_proj.bias", {NKV * HS}, Init::zeros, 0, kColumn);
            }
            d.end_unit();
        };
        d.tensor(h + "input_layernorm.weight", {C}, O, 0);
        d.tensor(h + "self_attn.q_proj.weight", {NH * HS, C}, N, std, kColumn);
        d.tensor(h + "self_attn.k_proj.weight", {NKV * HS, C}, N, std, kColumn);
        d.tensor(h + "self_attn.v_proj.weight", {NKV * HS, C}, N, std, kColumn);
        d.tensor(h + "self_attn.o_proj.weight", {C, NH * HS}, N, std, kRow);
        d.tensor(h + "post_attention_layernorm.weight", {C}, O, 0);
        if (E > 0) {
            // Mixtral's names; each projection of all experts is one [E, ...] tensor (expert
            // e's matrix its e-th block: a range of experts is a contiguous slice). None splits
            // over tp: under tensor parallelism every tp rank holds its ep slice of the experts
            // whole and runs the MoE block on the rows every tp rank holds (llama.hpp).
            d.tensor(h + "block_sparse_moe.gate.weight", {E, C}, N, std);
            d.expert_tensor(h + "block_sparse_moe.experts.w1.weight", {E, F, C}, N, std);
            d.expert_tensor(h + "block_sparse_moe.experts.w2.weight", {E, C, F}, N, std);
            d.expert_tensor(h + "block_sparse_moe.experts.w3.weight", {E, F, C}, N, std);
            if (const int64_t SF = cfg.n_shared_experts * F; SF > 0) {
                // Gate and up back to back: one [2 SF, C] product, as the dense MLP.
                const std::string s = h + "block_sparse_moe.shared_experts.";
                d.tensor(s + "gate_proj.weight", {SF, C}, N, std);
                d.tensor(s + "up_proj.weight", {SF, C}, N, std);
                d.tensor(s + "down_proj.weight", {C, SF}, N, std);
            }
            end_block();
            continue;
        }
        d.tensor(h + "mlp.gate_proj.weight", {F, C}, N, std, kColumn);
        d.tensor(h + "mlp.up_proj.weight", {F, C}, N, std, kColumn);
        d.tensor(h + "mlp.down_proj.weight", {C, F}, N, std, kRow);
        end_block();
    }
    d.tensor("norm.weight", {C}, O, 0);
    if (!cfg.tie_embeddings)
        d.tensor("lm_head.weight", {cfg.vocab_size, C}, N, std, kColumn, cfg.padded_vocab());
    d.end_unit();
}

std::unique_ptr<Model> make(const ModelConfig& cfg, const ModelShard& shard, TpComm* tp, bool sp) {
    return std::make_unique<Llama>(cfg, shard, tp, sp);
}

std::vector<LinearShape> layer_linears(const ModelConfig& cfg) {
    const int64_t C = cfg.n_embd, HS = cfg.head_dim(), F = cfg.ffn();
    if (cfg.n_experts > 0) {
        // Per token: the router, and the k experts it is routed to.
        const int64_t k = cfg.experts_per_token;
        // Under --dtype bf16 ln1 and the attention output are kept as bf16; the MoE block's
        // inputs stay fp32 (llama.hpp).
        return {{"self_attn.qkv", (cfg.n_head + 2 * cfg.kv_heads()) * HS, C, true, true},
                {"self_attn.o_proj", C, cfg.n_head * HS, false, true},
                {"block_sparse_moe.gate", cfg.n_experts, C, false},
                {"block_sparse_moe.experts.w1_w3", k * 2 * F, C, true},
                {"block_sparse_moe.experts.w2", C, k * F, false},
                {"block_sparse_moe.shared_experts.gate_up", 2 * cfg.n_shared_experts * F, C, true},
                {"block_sparse_moe.shared_experts.down_proj", C, cfg.n_shared_experts * F, false}};
    }
    // Under --dtype bf16 every product's input is kept as bf16: ln1, atty, ln2, act (llama.hpp);
    // gate/up's output gradient comes rounded from the SwiGLU's backward.
    return {{"self_attn.qkv", (cfg.n_head + 2 * cfg.kv_heads()) * HS, C, true, true},
            {"self_attn.o_proj", C, cfg.n_head * HS, false, true},
            {"mlp.gate_up", 2 * F, C, true, true, true},
            {"mlp.down_proj", C, F, false, true}};
}

ActivationTerms korthikanti_terms(const ModelConfig& cfg) {
    // Korthikanti et al.'s accounting without dropout: the two norms' inputs and the q/k/v and
    // gate/up inputs (8h) stay whole under tp; q and the attention output (2·2·a·d), k and v
    // (2·2·kv·d), gate and up (2·2F) and their product (2F) split; the softmax output (2a per
    // key) is the only score tensor.
    const double h = double(cfg.n_embd), d = double(cfg.head_dim()), a = double(cfg.n_head);
    // An MoE layer keeps k experts' gate, up and product per token.
    const double kv = double(cfg.kv_heads()),
                 F = double(cfg.ffn()) *
                     double(cfg.n_experts > 0 ? cfg.experts_per_token + cfg.n_shared_experts : 1);
    // fp8: the q/k/v and gate/up inputs (two norm outputs) and the down input (2F). No
    // embedding dropout either. The product (2F) is the down input.
    return {8 * h, 4 * a * d + 4 * kv * d + 6 * F, 2 * a, 4 * h, 2 * F, 0, 2 * F};
}

ModelConfig read_hf(const std::filesystem::path& dir) {
    const ckpt::HfLlamaConfig h = ckpt::read_hf_llama_config(dir);
    ModelConfig c;
    c.family = "llama";
    c.vocab_size = h.vocab_size;
    c.n_positions = h.max_position_embeddings;
    c.n_layer = h.num_hidden_layers;
    c.n_head = h.num_attention_heads;
    c.n_kv_head = h.num_key_value_heads;
    c.n_embd = h.hidden_size;
    c.n_inner = h.intermediate_size;
    c.n_head_dim = h.head_dim == h.hidden_size / h.num_attention_heads ? 0 : h.head_dim;
    c.ln_eps = float(h.rms_norm_eps);
    c.rope_theta = h.rope_theta;
    c.tie_embeddings = h.tie_word_embeddings;
    c.rope_scaling = {h.rope_scaling.type, h.rope_scaling.factor, h.rope_scaling.low_freq_factor,
                      h.rope_scaling.high_freq_factor,
                      h.rope_scaling.original_max_position_embeddings};
    // Mixtral: renormalised top-k, its aux coefficient, no z-loss.
    c.n_experts = h.num_local_experts;
    c.experts_per_token = h.num_experts_per_tok;
    if (c.n_experts > 0) c.moe_aux_loss_coef = h.router_aux_loss_coef;
    c.validate((dir / "config.json").string());
    return c;
}

void write_hf(const std::filesystem::path& dir, const ModelConfig& c) {
    // LlamaConfig's attention_bias puts a bias on o_proj too.
    WEFT_CHECK(!c.qkv_bias,
               "cannot write {} as LlamaForCausalLM: the model has biases on q/k/v only, which "
               "Llama's attention_bias does not give (use the qwen2 family)",
               (dir / "config.json").string());
    ckpt::HfLlamaConfig h;
    h.hidden_size = c.n_embd;
    h.intermediate_size = c.ffn();
    h.num_hidden_layers = c.n_layer;
    h.num_attention_heads = c.n_head;
    h.num_key_value_heads = c.kv_heads();
    h.head_dim = c.head_dim();
    h.vocab_size = c.vocab_size;
    h.max_position_embeddings = c.n_positions;
    h.rms_norm_eps = c.ln_eps_decimal();
    h.rope_theta = c.rope_theta;
    h.tie_word_embeddings = c.tie_embeddings;
    h.rope_scaling.type = c.rope_scaling.type;
    h.rope_scaling.factor = c.rope_scaling.factor;
    h.rope_scaling.low_freq_factor = c.rope_scaling.low_freq_factor;
    h.rope_scaling.high_freq_factor = c.rope_scaling.high_freq_factor;
    h.rope_scaling.original_max_position_embeddings = c.rope_scaling.original_max_position;
    if (c.n_experts > 0) {
        // MixtralForCausalLM always renormalises the chosen weights; the z-loss and a capacity
        // are training settings it has no key for, and are left out.
        WEFT_CHECK(c.n_shared_experts == 0,
                   "cannot write {} as MixtralForCausalLM: the model has {} shared experts, which "
                   "Mixtral has not",
                   (dir / "config.json").string(), c.n_shared_experts);
        WEFT_CHECK(c.moe_renormalize,
                   "cannot write {} as MixtralForCausalLM: the model routes without "
                   "renormalising the top-{} weights, which Mixtral always does",
                   (dir / "config.json").string(), c.experts_per_token);
        h.num_local_experts = c.n_experts;
        h.num_experts_per_tok = c.experts_per_token;
        h.router_aux_loss_coef = c.moe_aux_loss_coef;
    }
    ckpt::write_hf_llama_config(dir, h);
}

HfTensorName hf_tensor(const ModelConfig&, const ParamSpec& p) {
    // LlamaForCausalLM: the decoder under "model.", the untied head beside it; nn.Linear
    // weights are [out, in] as weft stores them. MixtralForCausalLM keeps one tensor per expert
    // (block_sparse_moe.experts.{e}.w1.weight) where weft has one [E, ...] tensor.
    if (p.name == "lm_head.weight") return {p.name, false};
    const std::string experts = "block_sparse_moe.experts.";
    if (const size_t at = p.name.find(experts); at != std::string::npos) {
        std::string name = "model." + p.name;
        name.insert(6 + at + experts.size(), "{}.");
        return {name, false, true};
    }
    return {"model." + p.name, false};
}

}  // namespace

const Family& llama_family() {
    static const Family f{
        "llama",
        {{"llama", "LlamaForCausalLM"}, {"mixtral", "MixtralForCausalLM"}},
        {
            // Tests: 2 layers, 8 query heads sharing 4 key/value heads (so tp 2 and 4 split
            // both), untied head, GPT-2's vocabulary for the bundled corpus.
            {"llama-tiny", preset({50257, 256, 2, 8, 4, 64, 192, 10000.0, false})},
            // SmolLM-135M (HuggingFaceTB/SmolLM-135M config.json).
            {"smollm-135m", preset({49152, 2048, 30, 9, 3, 576, 1536, 10000.0, true})},
            // TinyLlama-1.1B.
            {"tinyllama-1.1b", preset({32000, 2048, 22, 32, 4, 2048, 5632, 10000.0, false})},
            // Meta Llama 3 8B and 70B; Llama 3.1 405B with its llama3 rope scaling.
            {"llama-3-8b", preset({128256, 8192, 32, 32, 8, 4096, 14336, 500000.0, false})},
            {"llama-3-70b", preset({128256, 8192, 80, 64, 8, 8192, 28672, 500000.0, false})},
            {"llama-3.1-405b", preset({128256, 131072, 126, 128, 8, 16384, 53248, 500000.0, false},
                                      1e-5f, {"llama3", 8.0, 1.0, 4.0, 8192})},
            // Meta Llama 3.2 1B and 3B (meta-llama/Llama-3.2-{1B,3B} config.json): tied
            // embeddings, llama3 rope scaling of factor 32.
            {"llama-3.2-1b", preset({128256, 131072, 16, 32, 8, 2048, 8192, 500000.0, true}, 1e-5f,
                                    {"llama3", 32.0, 1.0, 4.0, 8192})},
            {"llama-3.2-3b", preset({128256, 131072, 28, 24, 8, 3072, 8192, 500000.0, true}, 1e-5f,
                                    {"llama3", 32.0, 1.0, 4.0, 8192})},
            // Mixture of experts. Tests: llama-tiny's attention, 4 experts of width 128, top 2
            // renormalised, both router losses on; trains in seconds on the bundled corpus.
            {"moe-tiny", preset({50257, 256, 2, 8, 4, 64, 128, 10000.0, false}, 1e-5f, {},
                                {4, 2, true, 0.01, 0.001})},
            // OLMoE-1B-7B's shape (allenai/OLMoE-1B-7B-0924: 64 experts, top 8 not renormalised,
            // aux 0.01, z 0.001); weft's Llama has no QK-norm, so it is OLMoE's size and routing,
            // not its checkpoint.
            {"olmoe-1b-7b", preset({50304, 4096, 16, 16, 16, 2048, 1024, 10000.0, false}, 1e-5f, {},
                                   {64, 8, false, 0.01, 0.001})},
            // Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1 config.json: top 2 of 8, aux 0.02).
            {"mixtral-8x7b", preset({32000, 32768, 32, 32, 8, 4096, 14336, 1000000.0, false}, 1e-5f,
                                    {}, {8, 2, true, 0.02, 0})},
        },
        validate,
        declare,
        make,
        [](const ModelConfig& cfg, int64_t B, int64_t T, const LayerSpan& span) {
            return LlamaActivations::floats(cfg, B, T, span);
        },
        [](const ModelConfig& cfg, int64_t B, int64_t T, int tp, bool sp) {
            return Llama::scratch_floats(cfg, B, T, tp, sp);
        },
        Llama::row_floats,
        layer_linears,
        korthikanti_terms,
        read_hf,
        write_hf,
        hf_tensor,
        // The rotary frequencies, saved by older transformers; a tied head's copy of the
        // embedding (an untied head reads lm_head.weight before this applies).
        {".rotary_emb.inv_freq", "lm_head.weight"},
    };
    return f;
}

}  // namespace weft::model
