#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/ckpt/checkpoint_dir.hpp"
#include "weft/ckpt/digest.hpp"
#include "weft/ckpt/manifest.hpp"
#include "weft/cli/commands.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/train/manifest_check.hpp"

namespace weft::cli {

namespace {

struct CkptArgs {
    std::filesystem::path dir, hf_out;
};

// Prints what the manifest says, checks it against its model and checks every shard; an error
// (exit 1) if any is BAD.
void inspect(const std::filesystem::path& dir_or_run) {
    const std::filesystem::path dir = ckpt::resolve_checkpoint(dir_or_run);
    const ckpt::Manifest m = ckpt::read_manifest(dir);
    fmt::print("checkpoint {}\n", dir.string());
    fmt::print("step {}, saved with layout {}, format version {}\n", m.step, m.layout,
               ckpt::kCheckpointVersion);
    fmt::print("model {}\n", m.model.dump());
    fmt::print("tensors ({}):\n", m.tensors.size());
    for (const auto& t : m.tensors) {
        const int dim = t.value("tp_dim", -1);
        fmt::print("  {:<40} [{}]{}\n", t.value("name", "?"),
                   fmt::join(t.value("shape", std::vector<int64_t>{}), ", "),
                   dim < 0 ? "" : fmt::format("  tp split dim {}", dim));
    }
    fmt::print("shards ({}):\n", m.shards.size());
    int bad = 0;
    int64_t total = 0;
    for (const ckpt::ShardEntry& s : m.shards) {
        const auto problem = ckpt::check_shard(dir, s);
        bad += problem ? 1 : 0;
        total += s.bytes;
        fmt::print("  {}  rank {:>3}  tp {}/{}  {:>12} bytes  {:>4} ranges  {}  {}{}\n", s.file,
                   s.rank, s.tp_rank, s.tp, s.bytes, s.ranges.size(), ckpt::digest_text(s.digest),
                   problem ? "BAD" : "OK", problem ? ": " + *problem : "");
    }
    std::string manifest_problem;
    try {
        train::check_manifest_model(m, (dir / ckpt::kManifestFile).string());
    } catch (const Error& e) {
        manifest_problem = e.what();
    }
    fmt::print("manifest {}{}\n", manifest_problem.empty() ? "OK" : "BAD: ", manifest_problem);
    fmt::print("{} shard(s), {} bytes, {} BAD\n", m.shards.size(), total, bad);
    WEFT_CHECK(manifest_problem.empty(),
               "checkpoint {}: the manifest does not describe its model (BAD above)", dir.string());
    WEFT_CHECK(bad == 0, "checkpoint {}: {} of {} shard files are damaged (BAD above)",
               dir.string(), bad, m.shards.size());
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
    CLI::App* c = app.add_subcommand("ckpt", "Inspect or convert a weft checkpoint");
    c->require_subcommand(1);
    auto a = std::make_shared<CkptArgs>();

    CLI::App* i = c->add_subcommand(
        "inspect",
        "Print a checkpoint's layout, step, tensors and shard files, and verify every shard's "
        "size and digest (OK/BAD; exit 1 if any is BAD)");
    i->add_option("DIR", a->dir, "Checkpoint directory, or a run directory (its latest)")
        ->required();
    i->callback([a] { inspect(a->dir); });

    CLI::App* v = c->add_subcommand(
        "convert", "Write a checkpoint as a Hugging Face directory (what `weft export` writes)");
    v->add_option("DIR", a->dir, "Checkpoint directory, or a run directory (its latest)")
        ->required();
    v->add_option("--to-hf", a->hf_out, "Hugging Face directory to write")->required();
    v->callback([a] {
        check_output_paths({{a->hf_out, "--to-hf", true}});
        export_checkpoint_to_hf(a->dir, a->hf_out, "--to-hf");
    });
}

}  // namespace weft::cli
