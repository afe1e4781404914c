#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/cli/layout_options.hpp"
#include "weft/cli/model_options.hpp"
#include "weft/core/error.hpp"
#include "weft/data/token_file.hpp"
#include "weft/train/evaluate.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

namespace {
struct EvalArgs {
    std::filesystem::path model_dir, ckpt, data;
    int64_t batch_size = 8, seq_len = 1024, batches = 8;
    bool json = false;
    data::TokenFormat data_format = data::TokenFormat::llmc;
};
}  // namespace

void add_eval_command(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* c = app.add_subcommand(
        "eval", "Mean loss of a model over the first batches of a token file, in sequential order");
    add_model_source_options(c, a->model_dir, a->ckpt);
    c->add_option("--data", a->data, "Token file")->required();
    add_data_format_option(c, a->data_format);
    c->add_option("--batch-size", a->batch_size, "Sequences per batch")->capture_default_str();
    c->add_option("--seq-len", a->seq_len, "Tokens per sequence")->capture_default_str();
    c->add_option("--batches", a->batches, "Batches to evaluate (fewer if the file is shorter)")
        ->capture_default_str();
    c->add_flag("--json", a->json, "Print {\"loss\": ..., \"tokens\": ...}");
    c->callback([a] {
        WEFT_CHECK(a->batch_size >= 1, "--batch-size must be at least 1, got {}", a->batch_size);
        WEFT_CHECK(a->batches >= 1, "--batches must be at least 1, got {}", a->batches);
        data::TokenFile file = data::TokenFile::open(a->data, a->data_format);
        // Every input checked against the model's config before its weights are read.
        const train::ModelSource source = train::open_model_source(a->model_dir, a->ckpt);
        data::check_token_ids(file, source.cfg.vocab_size);
        WEFT_CHECK(a->seq_len >= 1 && a->seq_len <= source.cfg.n_positions,
                   "--seq-len must be in [1, {}] (the model's n_positions), got {}",
                   source.cfg.n_positions, a->seq_len);
        train::LoadedModel m = train::load_model(source);
        train::EvalResult r =
            train::evaluate(*m.model, m.params.data(), file, a->batch_size, a->seq_len, a->batches);
        if (a->json)
            fmt::print("{{\"loss\": {:.6f}, \"tokens\": {}}}\n", r.loss, r.tokens);
        else
            fmt::print("loss {:.6f} over {} tokens\n", r.loss, r.tokens);
    });
}

}  // namespace weft::cli
