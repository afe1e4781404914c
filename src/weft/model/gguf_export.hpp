#pragma once
// A model as a GGUF file that llama.cpp loads, in its architecture of the family's name (gpt2,
// llama for Llama and Mixtral, qwen2): the metadata keys, tensor names and rotary layout
// convert_hf_to_gguf.py writes for the Hugging Face export, with a byte-level BPE vocabulary
// (GPT-2's files, or a Hugging Face tokenizer.json's).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "weft/ckpt/gguf.hpp"
#include "weft/model/config.hpp"
#include "weft/model/params.hpp"

namespace weft::model {

// A byte-level BPE vocabulary as llama.cpp's "gpt2" tokenizer reads it: tokens in id order and
// merges "left right" best first, both spelled in GPT-2's byte -> character alphabet (as
// encoder.json and vocab.bpe hold them).
struct GgufBpeVocab {
    std::vector<std::string> tokens, merges;
    int32_t eot = -1;  // the end-of-text token: llama.cpp's EOS, and its BOS unless `bos` is set
    // llama_token_type per token; empty: every token normal but `eot` (control).
    std::vector<int32_t> types = {};
    int32_t bos = -1;
    std::string pre = "gpt-2";  // llama.cpp's name of the pre-tokenizer
};

// Whether `cfg` can be written: GPT-2, a Llama or Mixtral (renormalised top-k, no shared experts)
// without q/k/v biases, or a dense Qwen2; any rope scaling weft has, and a tokenizer of at most
// the model's vocabulary. Otherwise one error naming the family or the feature; called before
// any weight is read.
void check_gguf_export(const ModelConfig& cfg, const GgufBpeVocab& vocab);

// Writes `file` (atomically): the whole model of `layout` (tp 1) from `flat`, matrices as `type`,
// norms F32 as convert_hf_to_gguf.py keeps 1-D tensors.
void write_gguf_model(const std::filesystem::path& file, const ModelConfig& cfg,
                      const ParamLayout& layout, const float* flat, ckpt::GgmlType type,
                      const GgufBpeVocab& vocab);

}  // namespace weft::model
