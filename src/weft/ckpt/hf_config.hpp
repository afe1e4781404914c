#pragma once
// The Hugging Face GPT-2 config.json: read to load a pretrained model directory, written next to
// exported weights so that transformers' GPT2LMHeadModel.from_pretrained loads them as is.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace weft::ckpt {

struct HfGpt2Config {
    int64_t n_embd = 0, n_layer = 0, n_head = 0, n_positions = 0, vocab_size = 0;
    double layer_norm_epsilon = 1e-5;
};

// A config.json file as a JSON object; throws naming the file when it is missing, not JSON or
// not an object (`expected` says what the directory should have been, for the message).
nlohmann::json read_config_json(const std::filesystem::path& file, std::string_view expected);

// A config.json key that changes the model transformers builds, with the values for which that
// model is the one weft computes. Absent or null is transformers' default, which weft computes.
struct HfModelKey {
    std::string_view key;
    std::vector<nlohmann::json> supported;
    std::string_view why;  // what weft computes, for the message ("weft scales ... by ...")
};

// Throws naming the file, the key, its value and the supported ones at the first key whose value
// is not supported: weft would run another model than transformers builds from the file. Keys
// that leave the model as is (dropout, token ids, torch_dtype, use_cache, ...) have no rule.
void check_model_keys(const nlohmann::json& config, const std::filesystem::path& file,
                      std::span<const HfModelKey> keys);

// Reads MODEL_DIR/config.json. Throws naming the key and file on a missing file, bad JSON, a
// missing or non-integer (or non-positive) size key, model_type other than "gpt2", or a key that
// asks for a GPT-2 weft does not compute: an activation_function other than the tanh GELU, n_inner
// other than 4 x n_embd, scale_attn_weights false, scale_attn_by_inverse_layer_idx true,
// tie_word_embeddings false or add_cross_attention true.
HfGpt2Config read_hf_config(const std::filesystem::path& model_dir);

// Writes MODEL_DIR/config.json atomically, with every key transformers writes for GPT-2.
void write_hf_config(const std::filesystem::path& model_dir, const HfGpt2Config& config);

}  // namespace weft::ckpt
