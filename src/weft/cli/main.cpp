#include "weft/cli/main.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>

#include "weft/cli/commands.hpp"
#include "weft/cli/config_file.hpp"
#include "weft/cli/flag_checks.hpp"
#include "weft/cli/omp_spin.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"

namespace weft::cli {

int main(int argc, char** argv) {
    short_omp_spin(argc, argv);
    // Under mpirun MPI is up for the whole command, so every rank knows its rank before parsing.
    // A plain process starts MPI only when a command builds its process mesh (train, bench
    // train, profile): the singleton start costs about 0.35 s, which help, refused flags and the
    // commands that never communicate do not pay. `weft run` starts MPI jobs and must not be an
    // MPI process itself.
    std::optional<comm::MpiEnv> mpi_env;
    const bool launcher = argc >= 2 && std::string_view(argv[1]) == "run";
    if (!launcher && comm::under_mpirun()) mpi_env.emplace(&argc, &argv);
    if (!launcher && !comm::under_mpirun()) mpi_env.emplace(comm::MpiEnv::Deferred{});
    const int rank = mpi_env ? mpi_env->rank() : 0, size = mpi_env ? mpi_env->size() : 1;
    CLI::App app{
        "weft: train transformer language models (GPT-2, Llama, Qwen2, Mixtral-style mixtures "
        "of experts) with data, tensor, pipeline, context and expert parallelism",
        "weft"};
    app.require_subcommand(1);
    app.fallthrough(false);
    add_train_command(app);
    add_run_command(app);
    add_eval_command(app);
    add_sample_command(app);
    add_prepare_command(app);
    add_export_command(app);
    add_bench_command(app);
    add_pipeline_command(app);
    add_plan_command(app);
    add_profile_command(app);
    add_ckpt_command(app);
    add_serve_command(app);
    add_ppd_acceptance_command(app);
    add_distill_data_command(app);
    // A flag given twice (once by --config, once on the command line) keeps the last.
    std::function<void(CLI::App*)> last_wins = [&](CLI::App* a) {
        for (CLI::Option* o : a->get_options())
            if (o->get_type_size() != 0) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        for (CLI::App* s : a->get_subcommands({})) last_wins(s);
    };
    last_wins(&app);
    require_finite_floats(app);
    try {
        std::vector<std::string> args = expand_config(argc, argv, app);
        std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        // Every rank parses the same arguments: one of them speaks.
        return rank == 0 ? app.exit(e) : (e.get_exit_code() ? 1 : 0);
    } catch (const Error& e) {
        // With several ranks, returning would leave this one in MPI_Finalize while the others
        // wait for it: end the whole job instead. Bad input fails on every rank alike, so rank 0
        // names it; the others give it time to, since their abort would kill it mid-message. A
        // rank still alive after that failed alone, and names its own error.
        if (size > 1) {
            if (rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
            comm::abort_job(fmt::format("error: {}", e.what()), 1);
        }
        fmt::print(stderr, "weft: error: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        if (size > 1) comm::abort_job(fmt::format("internal error: {}", e.what()), 2);
        fmt::print(stderr, "weft: internal error: {}\n", e.what());
        return 2;
    }
    return 0;
}

}  // namespace weft::cli
