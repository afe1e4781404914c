#include "weft/cli/model_options.hpp"

#include <CLI/CLI.hpp>

#include "weft/core/error.hpp"
#include "weft/data/token_file.hpp"
#include "weft/decode/ppd_file.hpp"

namespace weft::cli {

void add_model_source_options(CLI::App* c, std::filesystem::path& model_dir,
                              std::filesystem::path& ckpt) {
    c->add_option("--model-dir", model_dir,
                  "Hugging Face model directory (GPT2LMHeadModel, LlamaForCausalLM, "
                  "MixtralForCausalLM or Qwen2ForCausalLM)");
    c->add_option("--ckpt", ckpt, "weft checkpoint, or a run directory (its latest)");
}

void add_tokenizer_options(CLI::App* c, std::filesystem::path& tokenizer,
                           std::filesystem::path& tokenizer_dir) {
    CLI::Option* dir =
        c->add_option("--tokenizer-dir", tokenizer_dir, "Directory with encoder.json and vocab.bpe")
            ->capture_default_str();
    c->add_option("--tokenizer", tokenizer,
                  "A Hugging Face tokenizer.json, or a directory holding one (byte-level BPE: "
                  "GPT-2, Llama 3, Qwen2, SmolLM), in place of GPT-2's files")
        ->excludes(dir);
}

void add_sampling_options(CLI::App* c, model::SampleOptions& o) {
    c->add_option("--temperature", o.temperature, "Softmax temperature (0: greedy)")
        ->capture_default_str();
    c->add_option("--top-k", o.top_k, "Keep only the k most likely tokens (0: all)")
        ->capture_default_str();
    c->add_option("--top-p", o.top_p,
                  "Keep the smallest set of tokens with this much probability (1: all)")
        ->capture_default_str();
    c->add_option("--seed", o.seed, "Seed of the sampling")->capture_default_str();
}

void add_generation_dtype_option(CLI::App* c, std::string& dtype) {
    c->add_option("--dtype", dtype,
                  "fp32, or bf16: matrix products on weights rounded to bf16 with fp32 "
                  "accumulation, and the KV cache in bf16")
        ->capture_default_str();
}

bool generation_bf16(const std::string& dtype) {
    WEFT_CHECK(dtype == "fp32" || dtype == "bf16", "--dtype must be fp32 or bf16, got '{}'", dtype);
    return dtype == "bf16";
}

void add_speculation_options(CLI::App* c, decode::SpecOptions& spec) {
    c->add_option("--spec", spec.kind,
                  "Guess tokens and verify them in one forward: none, ngram (prompt lookup: "
                  "what followed the text's last words earlier on), draft (a smaller model's "
                  "guesses, --draft) or ppd (trained prompt tokens, --ppd). The output is plain "
                  "decoding's: the same tokens when greedy, the same distribution when sampling")
        ->capture_default_str();
    c->add_option("--draft", spec.draft,
                  "--spec draft: the draft model, a weft checkpoint (or run directory) or a "
                  "Hugging Face model directory with the model's vocabulary");
    c->add_option("--spec-tokens", spec.ngram.max_tokens,
                  "Most tokens guessed a step; 0: the proposer's default (ngram 5; draft 1, 3 "
                  "with --spec-vocab-from; ppd 1, all its prompts with --spec-tree)")
        ->capture_default_str();
    c->add_option("--ngram-max", spec.ngram.max_n,
                  "--spec ngram: the longest run of the text's last tokens looked up")
        ->capture_default_str();
    c->add_option("--ngram-min", spec.ngram.min_n, "--spec ngram: the shortest run looked up")
        ->capture_default_str();
    c->add_option("--ppd", spec.ppd_file,
                  "--spec ppd: the prompt tokens `weft train --ppd-tokens K --base RUN` trained "
                  "(their run or checkpoint directory)");
}

void add_spec_tree_options(CLI::App* c, decode::SpecOptions& spec) {
    c->add_option("--spec-tree", spec.tree,
                  "--spec ppd: guess a sparse tree of this many nodes, at most --spec-tokens deep, "
                  "from the prompts' ranked candidates, the paths most likely kept by the "
                  "acceptance `weft ppd-acceptance` measured (0: a chain of their argmaxes)")
        ->capture_default_str();
    c->add_option("--draft-width", spec.draft_width,
                  "--spec draft at temperature 0: the draft's W best ids at each depth, its best "
                  "continuing the chain and the others leaves beside it (1: a chain)")
        ->capture_default_str();
}

std::optional<train::ModelSource> open_draft_source(const decode::SpecOptions& spec,
                                                    const model::ModelConfig& target, int tp,
                                                    bool on_rank0) {
    if (spec.kind != "draft") return std::nullopt;
    // weft sample's every rank would run the whole draft and must guess alike for the shards'
    // collectives to meet; prompt lookup's guesses are the same everywhere by construction, a
    // forward's are not promised to be. weft serve's other ranks run rank 0's batches, whatever
    // guessed them.
    WEFT_CHECK(
        tp == 1 || on_rank0,
        "--spec draft runs with --tp 1 only, got --tp {} (expected --spec ngram, ppd or none "
        "under tensor parallelism)",
        tp);
    WEFT_CHECK(std::filesystem::is_directory(spec.draft),
               "--draft {} is not a directory (expected a weft checkpoint, a run directory or a "
               "Hugging Face model directory)",
               spec.draft.string());
    train::ModelSource s = train::open_model_source(spec.draft);
    decode::check_draft(target, s.cfg);
    return s;
}

std::shared_ptr<const decode::PpdPrompts> open_ppd(const decode::SpecOptions& spec,
                                                   const model::ModelConfig& target, int tp) {
    // Under tp each rank's head holds a slice of the vocabulary, and a shortlist of it none.
    WEFT_CHECK(tp == 1 || spec.vocab_from.empty(),
               "--spec-vocab-from runs with --tp 1 only under --spec ppd, got --tp {} (expected "
               "the prompt rows over the whole vocabulary: no --spec-vocab-from)",
               tp);
    auto ppd = std::make_shared<decode::PpdPrompts>(decode::load_ppd(spec.ppd_file));
    decode::check_ppd_base(*ppd, target, spec.ppd_file);
    return ppd;
}

void add_spec_vocab_options(CLI::App* c, decode::SpecOptions& spec) {
    c->add_option("--spec-vocab", spec.vocab,
                  "--spec draft or ppd with --spec-vocab-from: the draft's rows and the prompt "
                  "rows compute logits over this many most frequent ids only (0: all); the "
                  "verify still uses the whole vocabulary, so the output is unchanged")
        ->capture_default_str();
    c->add_option("--spec-vocab-from", spec.vocab_from,
                  "--spec draft or ppd: a token file (the training data's .bin) whose most "
                  "frequent ids are the proposals' shortlist");
}

std::shared_ptr<const model::VocabShortlist> open_spec_vocab(const decode::SpecOptions& spec,
                                                             const model::ModelConfig& target,
                                                             bool size_given) {
    WEFT_CHECK(!size_given || !spec.vocab_from.empty(),
               "--spec-vocab {} needs --spec-vocab-from FILE (a token file whose most frequent "
               "ids make the shortlist)",
               spec.vocab);
    if (spec.vocab_from.empty() || spec.vocab == 0) return nullptr;
    WEFT_CHECK(spec.vocab <= target.vocab_size,
               "--spec-vocab {} is more than the model's {} ids (expected 1 .. {}, or 0 for all)",
               spec.vocab, target.vocab_size, target.vocab_size);
    const data::TokenFile file = data::TokenFile::open(spec.vocab_from);
    data::check_token_ids(file, target.vocab_size);
    std::vector<int64_t> counts(size_t(target.vocab_size), 0);
    for (int64_t i = 0; i < file.size(); ++i)
        ++counts[size_t(file.data16() ? file.data16()[i] : file.data32()[i])];
    return std::make_shared<const model::VocabShortlist>(model::most_frequent(counts, spec.vocab),
                                                         target.vocab_size);
}

}  // namespace weft::cli
