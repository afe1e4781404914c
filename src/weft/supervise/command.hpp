#pragma once
// The command `weft run` supervises: what it needs to know of it (the run directory, its own
// --comm-timeout, whether it resumes) and the command line of each attempt.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace weft::supervise {

struct TrainCommand {
    std::vector<std::string> argv;
    std::filesystem::path out;           // its --out: the run directory
    std::optional<double> comm_timeout;  // its --comm-timeout, if it gives one
    bool resume = false;                 // it passes --resume already
};

// Reads `--out X` / `--out=X` (the last wins, as for weft's own flags), `--comm-timeout` and
// `--resume` from the command's words. Throws weft::Error for an empty command, one without
// --out, or a --comm-timeout that is not a number.
TrainCommand parse_train_command(const std::vector<std::string>& argv);

// The word of the program a launcher (mpirun, mpiexec, orterun, prterun, srun) in argv[0]
// starts: the first word after the launcher's options. nullopt when argv[0] is no launcher, or
// when its options cannot be read for certain: an option not known here directly before a word
// (it may take that word as its value), or one that moves where the program is looked up
// (--wdir, --path, --chdir, --app).
std::optional<size_t> launched_program(const std::vector<std::string>& argv);

// Refuses a command whose program, or the program its launcher starts, would not start here:
// not found as execvp looks for it (a path, else $PATH), a directory, or not executable. The
// error names the program. A launch that never starts is no fault a restart cures.
void check_programs(const std::vector<std::string>& argv);

// The words of one attempt: after the first, `--resume` is added so the run continues from its
// last committed checkpoint; `--comm-timeout S` is added when `add_comm_timeout` is set. Both go
// at the end, which is where mpirun passes them on to `weft train`.
std::vector<std::string> attempt_argv(const TrainCommand& command, int attempt,
                                      std::optional<double> add_comm_timeout);

}  // namespace weft::supervise
