#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/model/state_io.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

namespace {
struct ExportArgs {
    std::filesystem::path ckpt, out;
};
}  // namespace

void add_export_command(CLI::App& app) {
    auto a = std::make_shared<ExportArgs>();
    CLI::App* c =
        app.add_subcommand("export",
                           "Write a checkpoint as a Hugging Face model directory (config.json, "
                           "model.safetensors or its sharded index) that transformers loads as "
                           "GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM or "
                           "Qwen2ForCausalLM, by the "
                           "model's family");
    c->add_option("--ckpt", a->ckpt, "weft checkpoint, or a run directory (its latest)")
        ->required();
    c->add_option("--out", a->out,
                  "Directory to write (created; an existing one must hold only "
                  "a previous export)")
        ->required();
    c->callback([a] {
        check_output_paths({{a->out, "--out", true}});
        export_checkpoint_to_hf(a->ckpt, a->out, "--out");
    });
}

void export_checkpoint_to_hf(const std::filesystem::path& ckpt, const std::filesystem::path& out,
                             const char* out_flag) {
    namespace fs = std::filesystem;
    if (fs::exists(out)) {
        WEFT_CHECK(fs::is_directory(out), "{} {} exists and is not a directory", out_flag,
                   out.string());
        for (const auto& e : fs::directory_iterator(out)) {
            std::string n = e.path().filename().string();
            WEFT_CHECK(n == "config.json" || n == "model.safetensors",
                       "{} {} holds {}, which an export would delete; choose an empty or "
                       "new directory",
                       out_flag, out.string(), n);
        }
    }
    train::LoadedModel m = train::load_model({}, ckpt);
    model::write_hf_model(out, m.model->config(), m.model->layout(), m.params.data());
    fmt::print("wrote {}\n", out.string());
}

}  // namespace weft::cli
