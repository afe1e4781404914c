#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>

#include "weft/cli/commands.hpp"
#include "weft/cli/model_options.hpp"
#include "weft/cli/sample_text.hpp"
#include "weft/cli/tp_group.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

namespace {
struct SampleArgs {
    std::filesystem::path model_dir, ckpt, tokenizer_dir = "data";
    std::filesystem::path tokenizer;  // empty: GPT-2's files in tokenizer_dir
    std::string prompt = "\n";
    model::SampleOptions o;
    bool ignore_eos = false;
    std::string dtype = "fp32";
    decode::SpecOptions spec;
    int tp = 1;
};
}  // namespace

void add_sample_command(CLI::App& app) {
    auto a = std::make_shared<SampleArgs>();
    CLI::App* c = app.add_subcommand("sample", "Generate text from a model (KV-cached)");
    add_model_source_options(c, a->model_dir, a->ckpt);
    c->add_option("--prompt", a->prompt, "Text to continue (default: a newline)");
    c->add_option("--tokens", a->o.tokens, "Tokens to generate")->capture_default_str();
    add_sampling_options(c, a->o);
    c->add_flag("--ignore-eos", a->ignore_eos,
                "Go on past the tokenizer's end-of-text token (by default generation stops "
                "there, before --tokens)");
    add_tokenizer_options(c, a->tokenizer, a->tokenizer_dir);
    add_generation_dtype_option(c, a->dtype);
    add_speculation_options(c, a->spec);
    add_spec_vocab_options(c, a->spec);
    add_spec_tree_options(c, a->spec);
    add_tp_option(c, a->tp);
    c->callback([a, c] {
        a->o.validate();
        a->spec.validate();
        const bool bf16 = generation_bf16(a->dtype);
        // The model's source first: it is what the user named; its weights are read last.
        const train::ModelSource source = train::open_model_source(a->model_dir, a->ckpt);
        const std::optional<train::ModelSource> draft_source =
            open_draft_source(a->spec, source.cfg, a->tp);
        if (a->spec.kind == "ppd") a->spec.ppd = open_ppd(a->spec, source.cfg, a->tp);
        a->spec.shortlist = open_spec_vocab(a->spec, source.cfg, c->count("--spec-vocab") > 0);
        const std::unique_ptr<data::Tokenizer> tok =
            data::open_tokenizer(a->tokenizer, a->tokenizer_dir);
        const TpGroup tp(a->tp, source.cfg, "sample");
        train::LoadedModel m = train::load_model(source, tp.comm());
        train::LoadedModel d;
        std::unique_ptr<decode::DraftModel> draft;
        if (draft_source) {
            d = train::load_model(*draft_source);
            draft = std::make_unique<decode::DraftModel>(d.model->config(), d.model->layout(),
                                                         d.params.data(), bf16);
        }
        sample_text(m, *tok, a->prompt, a->o, a->ignore_eos, bf16, a->spec, draft.get(), stdout,
                    tp.comm());
    });
}

}  // namespace weft::cli
