#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/supervise/supervisor.hpp"

namespace weft::cli {

void add_run_command(CLI::App& app) {
    struct Args {
        supervise::SuperviseOptions options;
        std::vector<std::string> command;
    };
    auto a = std::make_shared<Args>();
    CLI::App* c = app.add_subcommand(
        "run",
        "Supervise a training command: restart it from its last checkpoint after a dead rank, a "
        "hang or a non-finite loss (docs/supervisor.md)");
    c->footer(
        "Example: weft run --max-restarts 3 -- mpirun -np 2 weft train --out RUN ...\n"
        "It watches RUN/heartbeat/, writes RUN/faults/attempt_<k>.json on a fault, and restarts "
        "the command with --resume. With --elastic it restarts on the ranks left, e.g. -np 4 "
        "with one rank lost and --batch-size 8 becomes -np 2 ... --dp 2.");
    c->add_option("--max-restarts", a->options.max_restarts, "Restarts before giving up")
        ->capture_default_str();
    c->add_option("--comm-timeout", a->options.comm_timeout,
                  "Seconds a rank may block in communication; passed to the train command "
                  "(0: the command's own, else $WEFT_COMM_TIMEOUT, else 300)")
        ->capture_default_str();
    c->add_option("--heartbeat-timeout", a->options.heartbeat_timeout,
                  "Seconds without heartbeat progress (a new step or phase) that count as a hang; "
                  "longer than any step, evaluation or checkpoint (0: the comm timeout plus a "
                  "margin)")
        ->capture_default_str();
    c->add_option("--grace", a->options.grace,
                  "Seconds between SIGTERM and SIGKILL when stopping the job")
        ->capture_default_str();
    c->add_flag("--elastic", a->options.elastic,
                "After a fault that names lost ranks (an exit, a hang), restart on the ranks left: "
                "tp, pp, cp and the micro-batch of the last checkpoint are kept, dp is lowered to "
                "the largest that fits and divides the batch, so gradient accumulation rises and "
                "the global batch stays; rewrites the launcher's -np/-n/--np and appends --dp and "
                "--micro-batch-size");
    c->add_option("--min-ranks", a->options.min_ranks,
                  "With --elastic: give up rather than restart on fewer ranks (0: no bound)")
        ->capture_default_str();
    c->add_option("command", a->command,
                  "The command to supervise, after `--`; its `weft train` arguments come last");
    c->callback([a] {
        const int code = supervise::supervise(a->options, a->command);
        if (code != 0) throw CLI::RuntimeError(code);
    });
}

}  // namespace weft::cli
