#include "weft/supervise/command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::supervise {

namespace {

// The value of flag `name` at args[i] ("--name V" or "--name=V"), advancing i past it.
std::optional<std::string> flag_value(const std::vector<std::string>& args, size_t& i,
                                      const std::string& name) {
    if (args[i] == name) {
        WEFT_CHECK(i + 1 < args.size(), "the supervised command ends with {} and no value", name);
        return args[++i];
    }
    if (args[i].rfind(name + "=", 0) == 0) return args[i].substr(name.size() + 1);
    return std::nullopt;
}

// Launcher options (Open MPI's mpirun, MPICH's mpiexec, Slurm's srun) by what follows them, as
// " word word ... ". `--opt=value` words are read whole and need no entry.
constexpr std::string_view kOneValue =
    " -np -n --np --n -c -N -npernode --npernode -npersocket --npersocket -ppn -H -host --host"
    " -hosts -hostfile --hostfile -f -machinefile --machinefile --default-hostfile -map-by"
    " --map-by -rank-by --rank-by -bind-to --bind-to -x -prefix --prefix -output-filename"
    " --output-filename -timeout --timeout -cpus-per-proc --cpus-per-proc -cpus-per-rank"
    " --cpus-per-rank -genvlist -envlist -launcher -iface --ntasks --nodes --cpus-per-task -t"
    " --time -p --partition -J --job-name -o --output -e --error -w --nodelist -A --account"
    " --mem --mpi --cpu-bind --export --ntasks-per-node --gres --gpus ";
constexpr std::string_view kTwoValues = " -mca --mca -gmca --gmca -genv -env ";
constexpr std::string_view kNoValue =
    " --oversubscribe -oversubscribe --allow-run-as-root -allow-run-as-root --report-bindings"
    " -report-bindings --tag-output -tag-output --timestamp-output -timestamp-output"
    " --use-hwthread-cpus -use-hwthread-cpus --display-map -display-map --display-allocation -v"
    " --verbose -q --quiet --merge-stderr-to-stdout --noprefix -nolocal --nolocal -genvall -l"
    " --label --exclusive -u --unbuffered -O --overcommit --pty ";
// These change where the launcher looks for the program, or take it from a file.
constexpr std::string_view kMovesProgram =
    " -wdir --wdir -wd --wd -path --path -D --chdir -app --app -configfile ";

bool among(std::string_view words, const std::string& w) {
    return words.find(" " + w + " ") != std::string_view::npos;
}

bool is_launcher(const std::string& word) {
    const std::string name = std::filesystem::path(word).filename().string();
    return name.rfind("mpirun", 0) == 0 || name.rfind("mpiexec", 0) == 0 || name == "orterun" ||
           name == "prterun" || name == "srun";
}

// Why execvp could not start `name`, or "" if it could.
std::string program_problem(const std::string& name) {
    namespace fs = std::filesystem;
    auto usable = [](const fs::path& p) {
        std::error_code ec;
        return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
    };
    if (name.find('/') != std::string::npos) {
        std::error_code ec;
        if (!fs::exists(name, ec)) return "no such file";
        if (fs::is_directory(name, ec)) return "a directory, not a program";
        return usable(name) ? "" : "not an executable file (no execute permission)";
    }
    const char* path = std::getenv("PATH");
    const std::string dirs = path ? path : "/usr/bin:/bin";
    for (size_t at = 0; at <= dirs.size();) {
        size_t end = dirs.find(':', at);
        if (end == std::string::npos) end = dirs.size();
        if (usable(fs::path(end > at ? dirs.substr(at, end - at) : ".") / name)) return "";
        at = end + 1;
    }
    return "no such program (not a path to an executable, nor in $PATH)";
}

}  // namespace

std::optional<size_t> launched_program(const std::vector<std::string>& argv) {
    if (argv.empty() || !is_launcher(argv[0])) return std::nullopt;
    bool after_unknown = false;  // the word before may be an unknown option's value
    for (size_t i = 1; i < argv.size(); ++i) {
        const std::string& w = argv[i];
        if (w == "--") return i + 1 < argv.size() ? std::optional(i + 1) : std::nullopt;
        const std::string key = w.substr(0, w.find('='));
        if (among(kMovesProgram, key)) return std::nullopt;
        if (w.size() < 2 || w[0] != '-') {
            if (after_unknown) return std::nullopt;
            return i;
        }
        after_unknown = false;
        if (key != w || among(kNoValue, w)) continue;
        if (among(kOneValue, w)) {
            i += 1;
        } else if (among(kTwoValues, w)) {
            i += 2;
        } else {
            after_unknown = true;
        }
    }
    return std::nullopt;
}

void check_programs(const std::vector<std::string>& argv) {
    if (argv.empty()) return;
    if (const std::string why = program_problem(argv[0]); !why.empty())
        fail("weft run: cannot run '{}': {}", argv[0], why);
    if (const std::optional<size_t> at = launched_program(argv)) {
        const std::string& program = argv[*at];
        if (const std::string why = program_problem(program); !why.empty())
            fail("weft run: cannot run '{}', the program of `{}`: {}", program,
                 fmt::join(argv.begin(), argv.begin() + std::ptrdiff_t(*at) + 1, " "), why);
    }
}

TrainCommand parse_train_command(const std::vector<std::string>& argv) {
    WEFT_CHECK(!argv.empty(),
               "weft run: no command to supervise; expected `weft run [flags] -- <command...>`, "
               "e.g. `weft run -- mpirun -np 2 weft train --out RUN ...`");
    TrainCommand c;
    c.argv = argv;
    for (size_t i = 0; i < argv.size(); ++i) {
        if (auto v = flag_value(argv, i, "--out")) {
            c.out = *v;
        } else if (auto t = flag_value(argv, i, "--comm-timeout")) {
            char* end = nullptr;
            const double s = std::strtod(t->c_str(), &end);
            WEFT_CHECK(!t->empty() && *end == '\0' && s >= 0,
                       "the supervised command's --comm-timeout '{}' is not a number of seconds "
                       ">= 0",
                       *t);
            c.comm_timeout = s;
        } else if (argv[i] == "--resume" || argv[i] == "--resume=true") {
            c.resume = true;
        }
    }
    WEFT_CHECK(!c.out.empty(),
               "weft run: the command '{}' has no --out; the supervisor finds the run directory "
               "(heartbeats, checkpoints, fault reports) from the train command's --out RUN",
               fmt::join(argv, " "));
    return c;
}

std::vector<std::string> attempt_argv(const TrainCommand& command, int attempt,
                                      std::optional<double> add_comm_timeout) {
    std::vector<std::string> argv = command.argv;
    if (add_comm_timeout) {
        argv.push_back("--comm-timeout");
        argv.push_back(fmt::format("{}", *add_comm_timeout));
    }
    if (attempt > 0 && !command.resume) argv.push_back("--resume");
    return argv;
}

}  // namespace weft::supervise
