#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/cli/model_options.hpp"
#include "weft/data/token_file.hpp"
#include "weft/decode/ppd.hpp"
#include "weft/decode/ppd_file.hpp"

namespace weft::cli {

namespace {
struct PpdAcceptanceArgs {
    std::filesystem::path model_dir, ckpt, data;
    decode::SpecOptions spec;  // its ppd_file: --ppd
    decode::PpdMeasure m;
    std::string dtype = "fp32";
};
}  // namespace

void add_ppd_acceptance_command(CLI::App& app) {
    auto a = std::make_shared<PpdAcceptanceArgs>();
    a->spec.kind = "ppd";
    CLI::App* c = app.add_subcommand(
        "ppd-acceptance",
        "Measure how often each Parallel Prompt Decoding prompt's ranked candidates are the "
        "model's own greedy tokens on held-out text, and save the rates beside the prompts "
        "(--spec-tree of weft sample and weft serve chooses its tree from them)");
    add_model_source_options(c, a->model_dir, a->ckpt);
    c->add_option("--ppd", a->spec.ppd_file,
                  "The prompt tokens (`weft train --ppd-tokens`' run or checkpoint directory); "
                  "the rates go to its checkpoint's ppd_acceptance.json")
        ->required();
    c->add_option("--data", a->data, "Held-out tokens (a token file, as `weft train --val-data`)")
        ->required();
    c->add_option("--prompts", a->m.prompts, "Passages of --data decoded from, evenly spaced")
        ->capture_default_str();
    c->add_option("--prompt-tokens", a->m.prompt_tokens, "Tokens of each passage")
        ->capture_default_str();
    c->add_option("--tokens", a->m.tokens, "Greedy tokens generated after each")
        ->capture_default_str();
    c->add_option("--width", a->m.width, "Candidates ranked a prompt")->capture_default_str();
    add_generation_dtype_option(c, a->dtype);
    c->callback([a] {
        a->m.validate();
        a->m.bf16 = generation_bf16(a->dtype);
        const train::ModelSource source = train::open_model_source(a->model_dir, a->ckpt);
        const std::shared_ptr<const decode::PpdPrompts> ppd = open_ppd(a->spec, source.cfg, 1);
        const data::TokenFile file = data::TokenFile::open(a->data);
        data::check_token_ids(file, source.cfg.vocab_size);
        std::vector<int32_t> text(size_t(file.size()));
        file.read(0, file.size(), text.data());
        const train::LoadedModel m = train::load_model(source);
        const decode::PpdCounts counts = decode::measure_ppd(m.model->config(), m.model->layout(),
                                                             m.params.data(), *ppd, text, a->m);
        const decode::Acceptance rates = counts.rates();
        const std::filesystem::path out =
            decode::save_ppd_acceptance(a->spec.ppd_file, rates,
                                        {{"data", a->data.string()},
                                         {"prompts", a->m.prompts},
                                         {"prompt_tokens", a->m.prompt_tokens},
                                         {"tokens", a->m.tokens},
                                         {"dtype", a->dtype},
                                         {"seen", counts.seen},
                                         {"hits", counts.hits}});
        for (size_t d = 0; d < rates.size(); ++d) {
            std::string row;
            for (double r : rates[d]) row += fmt::format(" {:.3f}", r);
            fmt::print("weft: prompt {} ({} guesses): kept by rank{}\n", d + 1, counts.seen[d],
                       row);
        }
        fmt::print("weft: acceptance rates written to {}\n", out.string());
    });
}

}  // namespace weft::cli
