#include "weft/model/gguf_export.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/kernels/rope.hpp"
#include "weft/model/llama.hpp"

namespace weft::model {

namespace {

// llama.cpp's tensor name for a tensor of weft's (Llama: HF's names without "model."; GPT-2:
// HF's without "transformer.").
std::string gguf_name(const std::string& name) {
    static const std::pair<const char*, const char*> block[] = {
        // GPT-2 (llama.cpp's gpt2 architecture): fused q/k/v, biases everywhere.
        {"ln_1.weight", "attn_norm.weight"},
        {"ln_1.bias", "attn_norm.bias"},
        {"attn.c_attn.weight", "attn_qkv.weight"},
        {"attn.c_attn.bias", "attn_qkv.bias"},
        {"attn.c_proj.weight", "attn_output.weight"},
        {"attn.c_proj.bias", "attn_output.bias"},
        {"ln_2.weight", "ffn_norm.weight"},
        {"ln_2.bias", "ffn_norm.bias"},
        {"mlp.c_fc.weight", "ffn_up.weight"},
        {"mlp.c_fc.bias", "ffn_up.bias"},
        {"mlp.c_proj.weight", "ffn_down.weight"},
        {"mlp.c_proj.bias", "ffn_down.bias"},
        // Llama.
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        // Qwen2.
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        // Mixtral: the router and all experts' matrices as one [E, ...] tensor each, the layout
        // weft already keeps (convert_hf_to_gguf.py stacks Hugging Face's per-expert tensors).
        {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
        {"block_sparse_moe.experts.w1.weight", "ffn_gate_exps.weight"},
        {"block_sparse_moe.experts.w2.weight", "ffn_down_exps.weight"},
        {"block_sparse_moe.experts.w3.weight", "ffn_up_exps.weight"},
    };
    static const std::pair<const char*, const char*> whole[] = {
        {"embed_tokens.weight", "token_embd.weight"},
        {"norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"wte.weight", "token_embd.weight"},
        {"wpe.weight", "position_embd.weight"},
        {"ln_f.weight", "output_norm.weight"},
        {"ln_f.bias", "output_norm.bias"},
    };
    for (const auto& [ours, gg] : whole)
        if (name == ours) return gg;
    for (const std::string_view layers : {"layers.", "h."}) {
        if (!name.starts_with(layers)) continue;
        const size_t at = layers.size(), dot = name.find('.', at);
        const std::string rest = name.substr(dot + 1);
        for (const auto& [hf, gg] : block)
            if (rest == hf) return "blk." + name.substr(at, dot - at) + "." + gg;
    }
    fail("internal: no GGUF name for tensor '{}'", name);
}

// Hugging Face's rotary layout pairs dimension i of a head with i + head_dim/2 (rotate_half);
// llama.cpp's "normal" rope pairs 2i with 2i+1. convert_hf_to_gguf.py's permute interleaves each
// head's two halves of rows so that the same pairs rotate: row 2i <- i, row 2i+1 <- i + half.
std::vector<float> interleave_rotary_rows(const float* w, int64_t heads, int64_t head_dim,
                                          int64_t cols) {
    std::vector<float> out(size_t(heads * head_dim * cols));
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i)
            for (int64_t j = 0; j < 2; ++j)
                std::copy_n(w + (h * head_dim + j * half + i) * cols, cols,
                            out.data() + (h * head_dim + 2 * i + j) * cols);
    return out;
}

// llama_ftype: what general.file_type says the bulk of the weights are.
uint32_t file_type(ckpt::GgmlType t) {
    switch (t) {
        case ckpt::GgmlType::f32:
            return 0;
        case ckpt::GgmlType::f16:
            return 1;
        case ckpt::GgmlType::bf16:
            return 32;
    }
    return 0;
}

}  // namespace

void check_gguf_export(const ModelConfig& cfg, const GgufBpeVocab& vocab) {
    WEFT_CHECK(cfg.family == "llama" || cfg.family == "qwen2" || cfg.family == "gpt2",
               "GGUF export writes GPT-2, Llama, Mixtral and Qwen2 models (llama.cpp's gpt2, "
               "llama and qwen2 architectures); this model's family is {}",
               cfg.family);
    WEFT_CHECK(cfg.family == "llama" || cfg.n_experts == 0,
               "GGUF export: a {} model with {} experts is not one llama.cpp's {} architecture "
               "reads",
               cfg.family, cfg.n_experts, cfg.family);
    // llama.cpp's llama architecture routes as Mixtral: softmax, top k, renormalised.
    WEFT_CHECK(cfg.n_shared_experts == 0,
               "GGUF export: the model has {} shared experts, which llama.cpp's llama "
               "architecture (Mixtral) has not",
               cfg.n_shared_experts);
    WEFT_CHECK(cfg.n_experts == 0 || cfg.moe_renormalize,
               "GGUF export: the model routes without renormalising its top-{} weights, which "
               "llama.cpp's llama architecture (Mixtral) always does",
               cfg.experts_per_token);
    WEFT_CHECK(cfg.family == "qwen2" || !cfg.qkv_bias,
               "GGUF export: the model has q/k/v biases, which llama.cpp's llama architecture "
               "has not (its qwen2 architecture has: use the qwen2 family)");
    WEFT_CHECK(int64_t(vocab.tokens.size()) <= cfg.vocab_size,
               "GGUF export: the tokenizer has {} tokens, more than the model's vocabulary of {}",
               vocab.tokens.size(), cfg.vocab_size);
}

namespace {

// The tokenizer: byte-level BPE (GPT-2's, or a Hugging Face tokenizer.json's), padded to the
// model's vocabulary as convert_hf_to_gguf.py pads ("[PADn]", unused).
void add_tokenizer(ckpt::GgufMetadata& m, const ModelConfig& cfg, const GgufBpeVocab& vocab) {
    std::vector<std::string> tokens = vocab.tokens;
    std::vector<int32_t> types = vocab.types;  // llama_token_type: 1 normal, 3 control
    if (types.empty()) {
        types.assign(tokens.size(), 1);
        if (vocab.eot >= 0) types[size_t(vocab.eot)] = 3;
    }
    for (int64_t id = int64_t(tokens.size()); id < cfg.vocab_size; ++id) {
        tokens.push_back("[PAD" + std::to_string(id) + "]");
        types.push_back(5);  // unused
    }
    m.add_string("tokenizer.ggml.model", "gpt2");
    m.add_string("tokenizer.ggml.pre", vocab.pre);
    m.add_string_array("tokenizer.ggml.tokens", tokens);
    m.add_i32_array("tokenizer.ggml.token_type", types);
    m.add_string_array("tokenizer.ggml.merges", vocab.merges);
    if (vocab.eot >= 0) {
        m.add_u32("tokenizer.ggml.bos_token_id", uint32_t(vocab.bos >= 0 ? vocab.bos : vocab.eot));
        m.add_u32("tokenizer.ggml.eos_token_id", uint32_t(vocab.eot));
    }
    // weft trains on text without a BOS token (the corpus' documents are separated by EOT).
    m.add_bool("tokenizer.ggml.add_bos_token", false);
}

}  // namespace

void write_gguf_model(const std::filesystem::path& file, const ModelConfig& cfg,
                      const ParamLayout& layout, const float* flat, ckpt::GgmlType type,
                      const GgufBpeVocab& vocab) {
    check_gguf_export(cfg, vocab);
    WEFT_CHECK(layout.tp == 1, "internal: {} would be written from one tensor-parallel shard",
               file.string());
    const int64_t HS = cfg.head_dim();
    // llama.cpp's architecture of the same name, whose keys it prefixes.
    const std::string& arch = cfg.family;
    auto key = [&](std::string_view k) { return arch + "." + std::string(k); };
    ckpt::GgufMetadata m;
    m.add_string("general.architecture", arch);
    m.add_string("general.name", file.stem().string());
    m.add_u32("general.file_type", file_type(type));
    m.add_u32(key("vocab_size"), uint32_t(cfg.vocab_size));
    m.add_u32(key("context_length"), uint32_t(cfg.n_positions));
    m.add_u32(key("embedding_length"), uint32_t(cfg.n_embd));
    m.add_u32(key("block_count"), uint32_t(cfg.n_layer));
    m.add_u32(key("feed_forward_length"), uint32_t(cfg.ffn()));
    m.add_u32(key("attention.head_count"), uint32_t(cfg.n_head));
    if (arch == "gpt2") {
        m.add_f32(key("attention.layer_norm_epsilon"), cfg.ln_eps);
    } else {
        m.add_u32(key("attention.head_count_kv"), uint32_t(cfg.kv_heads()));
        m.add_u32(key("attention.key_length"), uint32_t(HS));
        m.add_u32(key("attention.value_length"), uint32_t(HS));
        m.add_u32(key("rope.dimension_count"), uint32_t(HS));
        m.add_f32(key("rope.freq_base"), float(cfg.rope_theta));
        m.add_f32(key("attention.layer_norm_rms_epsilon"), cfg.ln_eps);
    }
    if (cfg.n_experts > 0) {
        m.add_u32(key("expert_count"), uint32_t(cfg.n_experts));
        m.add_u32(key("expert_used_count"), uint32_t(cfg.experts_per_token));
    }
    if (cfg.rope_scaling.type == "linear") {
        m.add_string(key("rope.scaling.type"), "linear");
        m.add_f32(key("rope.scaling.factor"), float(cfg.rope_scaling.factor));
    }
    add_tokenizer(m, cfg, vocab);

    std::vector<ckpt::GgufTensor> tensors;
    // llama3 scaling divides each rotary frequency by its own factor, which llama.cpp reads from
    // rope_freqs.weight ([head_dim / 2], as convert_hf_to_gguf.py writes it): the unscaled
    // frequency over the scaled one.
    std::vector<float> rope_freqs;
    if (cfg.rope_scaling.type == "llama3") {
        const std::vector<double> plain = kernels::rope_inv_freq(HS, cfg.rope_theta, {});
        const std::vector<double> scaled =
            kernels::rope_inv_freq(HS, cfg.rope_theta, rope_scaling(cfg.rope_scaling));
        for (size_t i = 0; i < plain.size(); ++i) rope_freqs.push_back(float(plain[i] / scaled[i]));
        tensors.push_back({"rope_freqs.weight", {HS / 2}, ckpt::GgmlType::f32, rope_freqs.data()});
    }
    std::vector<std::vector<float>> permuted;
    permuted.reserve(2 * size_t(cfg.n_layer));
    for (const ParamSpec& p : layout.tensors) {
        const float* data = flat + p.offset;
        const bool q = p.name.ends_with("self_attn.q_proj.weight");
        // qwen2 rotates rotate_half's pairs in llama.cpp too (its NEOX rope): nothing to permute.
        if (arch == "llama" && (q || p.name.ends_with("self_attn.k_proj.weight"))) {
            permuted.push_back(
                interleave_rotary_rows(data, q ? cfg.n_head : cfg.kv_heads(), HS, cfg.n_embd));
            data = permuted.back().data();
        }
        // Norms and the router stay F32, as convert_hf_to_gguf.py keeps every 1-D tensor and
        // ffn_gate_inp.
        const bool router = p.name.ends_with("block_sparse_moe.gate.weight");
        const ckpt::GgmlType t = p.shape.size() == 1 || router ? ckpt::GgmlType::f32 : type;
        tensors.push_back({gguf_name(p.name), p.shape, t, data});
        // GPT-2's head is its token embedding: convert_hf_to_gguf.py writes it again as output.
        if (arch == "gpt2" && p.name == "wte.weight")
            tensors.push_back({"output.weight", p.shape, t, data});
    }
    ckpt::write_gguf(file, m, tensors);
}

}  // namespace weft::model
