#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <vector>

#include "weft/cli/commands.hpp"
#include "weft/cli/layout_options.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/prepare.hpp"
#include "weft/data/synthetic.hpp"
#include "weft/data/tokenizer.hpp"

namespace weft::cli {

namespace {
struct PrepareArgs {
    std::filesystem::path input = "data/tinyshakespeare.txt", out = "data", tokenizer_dir = "data";
    std::filesystem::path tokenizer;  // empty: GPT-2's files in tokenizer_dir
    int64_t val_tokens = 32768;
    std::filesystem::path index_of;  // a token file to index by its end-of-text tokens
    int64_t eot = 50256;
    data::TokenFormat data_format = data::TokenFormat::llmc;
    int64_t synthetic = 0;  // documents of a synthetic corpus; 0: tokenise --input
    std::string lengths = "lognormal:300:1.2";
    int64_t max_doc_len = 32768;
    uint64_t seed = 1;
};

void print_result(const data::PrepareResult& r) {
    fmt::print("{}: {} tokens, {} documents\n{}: {} tokens, {} documents\n", r.train_path.string(),
               r.train_tokens, r.train_documents, r.val_path.string(), r.val_tokens,
               r.val_documents);
}

// GPT-2's end-of-text id: a synthetic corpus is over GPT-2's vocabulary, so that every preset
// trains on it.
constexpr int32_t kSyntheticEot = 50256;
}  // namespace

void add_prepare_command(CLI::App& app) {
    auto a = std::make_shared<PrepareArgs>();
    CLI::App* c =
        app.add_subcommand("prepare",
                           "Tokenise a text file with the GPT-2 BPE (or a Hugging Face "
                           "tokenizer.json) into <stem>_train.bin and <stem>_val.bin (llm.c's "
                           "format; its uint32 layout for ids past 65535), each with its "
                           "document index <stem>_train.idx, <stem>_val.idx: a document is a "
                           "section of the text ending at a blank line (\"\\n\\n\")");
    CLI::Option* input =
        c->add_option("--input", a->input, "Text file (UTF-8)")->capture_default_str();
    c->add_option("--out", a->out, "Directory for the token files")->capture_default_str();
    c->add_option("--val-tokens", a->val_tokens,
                  "Tokens from the start that go to the validation file")
        ->capture_default_str();
    CLI::Option* dir =
        c->add_option("--tokenizer-dir", a->tokenizer_dir,
                      "Directory with GPT-2's encoder.json and vocab.bpe (the default tokenizer)")
            ->capture_default_str();
    CLI::Option* tokenizer =
        c->add_option(
             "--tokenizer", a->tokenizer,
             "A Hugging Face tokenizer.json, or a directory holding one, of the byte-level "
             "BPE kind (GPT-2, Llama 3, Qwen2, SmolLM). Documents are separated by its "
             "end-of-text token: eos_token of a tokenizer_config.json beside it, else the "
             "added token <|endoftext|>, <|end_of_text|> or </s>")
            ->excludes(dir);
    CLI::Option* synthetic =
        c->add_option(
             "--synthetic", a->synthetic,
             "Write a synthetic corpus of N documents instead (synthetic_train.bin, "
             "synthetic_val.bin and their indexes; GPT-2's vocabulary): each an end-of-text "
             "token and a random motif repeated, of lengths from --lengths")
            ->check(CLI::PositiveNumber)
            ->excludes(input)
            ->excludes(tokenizer)
            ->excludes(dir);
    CLI::Option* index_of =
        c->add_option("--index-of", a->index_of,
                      "Instead, write the document index of an existing token file (FILE.bin -> "
                      "FILE.idx) whose documents each begin with the end-of-text token --eot")
            ->excludes(input)
            ->excludes(tokenizer)
            ->excludes(dir)
            ->excludes(synthetic);
    c->add_option("--eot", a->eot, "End-of-text id that starts each document of --index-of")
        ->capture_default_str()
        ->needs(index_of);
    add_data_format_option(c, a->data_format);
    c->get_option("--data-format")->needs(index_of);
    c->add_option("--lengths", a->lengths,
                  "Document lengths of --synthetic: lognormal:MEDIAN:SIGMA or pareto:MIN:ALPHA")
        ->capture_default_str()
        ->needs(synthetic);
    c->add_option("--max-doc-len", a->max_doc_len, "Longest document of --synthetic, in tokens")
        ->capture_default_str()
        ->needs(synthetic);
    c->add_option("--seed", a->seed, "Seed of --synthetic's lengths and tokens")
        ->capture_default_str()
        ->needs(synthetic);
    c->callback([a] {
        if (!a->index_of.empty()) {
            const data::TokenFile file = data::TokenFile::open(a->index_of, a->data_format);
            const std::filesystem::path idx = data::doc_index_path(a->index_of);
            check_output_paths({{idx, "--index-of", false}});
            const std::vector<int64_t> starts = data::starts_at_token(file, a->eot);
            data::write_doc_index(idx, starts, file.size());
            fmt::print("{}: {} tokens, {} documents (each at end-of-text {})\n", idx.string(),
                       file.size(), starts.size(), a->eot);
            return;
        }
        check_output_paths({{a->out, "--out", true}});
        if (a->synthetic > 0) {
            const data::LengthDistribution d =
                data::parse_length_distribution(a->lengths, a->max_doc_len);
            const data::SyntheticCorpus corpus = data::synthetic_corpus(
                data::synthetic_lengths(d, a->synthetic, a->seed), kSyntheticEot, a->seed);
            const data::PrepareResult r = data::write_documents(corpus.tokens, corpus.starts,
                                                                a->out, "synthetic", a->val_tokens);
            print_result(r);
            return;
        }
        const std::unique_ptr<data::Tokenizer> tok =
            data::open_tokenizer(a->tokenizer, a->tokenizer_dir);
        data::PrepareResult r = data::prepare_dataset(a->input, a->out, *tok, a->val_tokens);
        print_result(r);
    });
}

}  // namespace weft::cli
