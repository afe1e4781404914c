#pragma once
// The flags of the commands that run a trained model (eval, sample, serve): where the model comes
// from, and which tokenizer turns text into its ids and back.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "weft/decode/speculative.hpp"
#include "weft/model/generate.hpp"
#include "weft/train/model_source.hpp"

namespace CLI {
class App;
}

namespace weft::cli {

// --model-dir (a Hugging Face directory) and --ckpt (a weft checkpoint or run directory);
// train::open_model_source checks that exactly one is given.
void add_model_source_options(CLI::App* c, std::filesystem::path& model_dir,
                              std::filesystem::path& ckpt);
// --tokenizer-dir (GPT-2's encoder.json and vocab.bpe) or --tokenizer (a tokenizer.json), as
// data::open_tokenizer takes them.
void add_tokenizer_options(CLI::App* c, std::filesystem::path& tokenizer,
                           std::filesystem::path& tokenizer_dir);

// --temperature, --top-k, --top-p and --seed of the commands that generate text offline (sample,
// distill-data), into `o`.
void add_sampling_options(CLI::App* c, model::SampleOptions& o);

// --dtype of the commands that generate (sample, serve): fp32, or bf16 products on weights
// rounded once (model::RowProducts).
void add_generation_dtype_option(CLI::App* c, std::string& dtype);
// Whether `dtype` is bf16; an error naming it unless fp32 or bf16.
bool generation_bf16(const std::string& dtype);
// --spec, --spec-tokens, --draft, --ppd, --ngram-max, --ngram-min of the commands that generate:
// guessed tokens verified in the same forward (docs/decoding.md).
void add_speculation_options(CLI::App* c, decode::SpecOptions& spec);
// --spec-tree N and --draft-width W (weft sample): --spec ppd's sparse tree of guesses, and
// --spec draft's leaves beside its chain.
void add_spec_tree_options(CLI::App* c, decode::SpecOptions& spec);
// --spec draft's model opened (not read) and its vocabulary checked against the model's; none
// for another --spec. Under `tp` above 1 an error naming --tp, unless `on_rank0` (weft serve: the
// draft runs on rank 0 alone, whose batches, and the KV moves of their kept leaves, the other
// ranks follow).
std::optional<train::ModelSource> open_draft_source(const decode::SpecOptions& spec,
                                                    const model::ModelConfig& target, int tp,
                                                    bool on_rank0 = false);
// --spec ppd's prompt tokens read and checked against the model they were trained on; every rank
// reads them (their rows are the batch's own embeddings, which no shard of the vocabulary holds).
// Under `tp` above 1 an error naming --spec-vocab-from if given (a vocabulary-sharded head has
// no shortlist).
std::shared_ptr<const decode::PpdPrompts> open_ppd(const decode::SpecOptions& spec,
                                                   const model::ModelConfig& target, int tp);
// --spec-vocab N and --spec-vocab-from FILE (weft sample): the proposals' vocabulary shortlist.
void add_spec_vocab_options(CLI::App* c, decode::SpecOptions& spec);
// The shortlist of --spec-vocab-from: the --spec-vocab ids most frequent in that token file
// (llm.c's layout, as `weft train --data` reads); none without the file or at --spec-vocab 0.
// An error naming the value unless N fits the model's vocabulary and the file holds its ids;
// `size_given`: --spec-vocab was on the command line, which then needs the file.
std::shared_ptr<const model::VocabShortlist> open_spec_vocab(const decode::SpecOptions& spec,
                                                             const model::ModelConfig& target,
                                                             bool size_given);

}  // namespace weft::cli
