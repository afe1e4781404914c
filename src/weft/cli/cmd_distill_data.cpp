#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/cli/model_options.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/token_file.hpp"
#include "weft/decode/continuations.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

namespace {
struct DistillDataArgs {
    std::filesystem::path model_dir, ckpt, data, out;
    decode::ContinuationOptions c;
    std::string dtype = "fp32";
};
}  // namespace

void add_distill_data_command(CLI::App& app) {
    auto a = std::make_shared<DistillDataArgs>();
    a->c.sample.temperature = 0;
    CLI::App* c = app.add_subcommand(
        "distill-data",
        "Write a model's own continuations of passages of a token file as a token file "
        "(`weft train --data`): sequence-level data to distill a draft from it (--teacher)");
    add_model_source_options(c, a->model_dir, a->ckpt);
    c->add_option("--data", a->data, "Token file the passages come from (as `weft prepare` writes)")
        ->required();
    c->add_option("--out", a->out,
                  "Token file to write (FILE.bin, its document index beside it as FILE.idx: "
                  "each passage and its continuation one document); an existing one is replaced")
        ->required();
    c->add_option("--passages", a->c.passages, "Passages of --data continued, evenly spaced")
        ->capture_default_str();
    c->add_option("--prompt-tokens", a->c.prompt_tokens, "Tokens of each passage")
        ->capture_default_str();
    c->add_option("--tokens", a->c.tokens, "Tokens generated after each passage")
        ->capture_default_str();
    add_sampling_options(c, a->c.sample);  // passage i draws from --seed + i
    c->add_option("--spec", a->c.spec.kind,
                  "none, or ngram: guesses from the passage and the text so far, verified (the "
                  "same tokens under greedy decoding, faster on text that repeats itself)")
        ->capture_default_str();
    add_generation_dtype_option(c, a->dtype);
    c->callback([a] {
        const bool bf16 = generation_bf16(a->dtype);
        a->c.bf16 = bf16;
        // The model first: it is what the user named; its weights are read last.
        const train::ModelSource source = train::open_model_source(a->model_dir, a->ckpt);
        const data::TokenFile file = data::TokenFile::open(a->data);
        a->c.validate(source.cfg.n_positions, file.size());
        data::check_token_ids(file, source.cfg.vocab_size);
        WEFT_CHECK(a->out.extension() == ".bin",
                   "--out {}: expected a token file named FILE.bin (its document index is "
                   "written beside it as FILE.idx)",
                   a->out.string());
        std::error_code ec;
        WEFT_CHECK(!std::filesystem::equivalent(a->out, a->data, ec),
                   "--out {} is --data: expected another file (the passages are read from it "
                   "while the continuations are written)",
                   a->out.string());
        const std::filesystem::path idx = data::doc_index_path(a->out);
        check_output_paths({{a->out, "--out", false}, {idx, "--out", false}});
        // Only the passages are read: --data may be a whole training corpus.
        const int64_t P = a->c.prompt_tokens;
        std::vector<int32_t> passages(size_t(a->c.passages * P));
        for (int64_t i = 0; i < a->c.passages; ++i)
            file.read(a->c.passage_start(i, file.size()), P, passages.data() + i * P);
        const train::LoadedModel m = train::load_model(source);
        const auto start = std::chrono::steady_clock::now();
        const decode::Continuations r = decode::continue_passages(
            m.model->config(), m.model->layout(), m.params.data(), passages, a->c);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        data::write_token_file(a->out, r.tokens);
        data::write_doc_index(idx, r.starts, int64_t(r.tokens.size()));
        fmt::print(
            "weft: {}: {} passages of {} tokens and {} {} tokens after each, {} tokens in "
            "{:.1f} s; its document index {}\n",
            a->out.string(), a->c.passages, a->c.prompt_tokens, a->c.tokens,
            a->c.sample.temperature == 0 ? "greedy" : "sampled", r.tokens.size(), s, idx.string());
    });
}

}  // namespace weft::cli
