#pragma once
// Each subcommand of `weft` adds itself to the application; its callback runs the command.
#include <filesystem>

namespace CLI {
class App;
}

namespace weft::cli {

void add_train_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_pipeline_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_ppd_acceptance_command(CLI::App& app);
void add_distill_data_command(CLI::App& app);

// `weft export` and `weft ckpt convert --to-hf`: a checkpoint as a Hugging Face directory.
// Errors about `out` name it as the command's `out_flag` does.
void export_checkpoint_to_hf(const std::filesystem::path& ckpt, const std::filesystem::path& out,
                             const char* out_flag);

}  // namespace weft::cli
