#pragma once
// The Hugging Face GPT-2 config.json: read to load a pretrained model directory, written next to
// exported weights so that transformers' GPT2LMHeadModel.from_pretrained loads them as is.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace weft::ckpt {

struct HfGpt2Config {
    int64_t n_embd = 0, n_layer = 0, n_head = 0, n_positions = 0, vocab_size = 0;
    double layer_norm_epsilon = 1e-5;
};

// A config.json file as a JSON object; throws naming the file when it is missing, not JSON or
// not an object (`expected` says what the directory should have been, for the message).
nlohmann::json read_config_json(const std::filesystem::path& file, std::string_view expected);

// Reads MODEL_DIR/config.json. Throws naming the key and file on a missing file, bad JSON, a
// missing or non-integer (or non-positive) size key, model_type other than "gpt2", or an
// activation_function other than gelu_new / gelu_pytorch_tanh (the tanh GELU weft implements).
HfGpt2Config read_hf_config(const std::filesystem::path& model_dir);

// Writes MODEL_DIR/config.json atomically, with every key transformers writes for GPT-2.
void write_hf_config(const std::filesystem::path& model_dir, const HfGpt2Config& config);

}  // namespace weft::ckpt
