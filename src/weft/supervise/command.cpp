#include "weft/supervise/command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

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

}  // namespace

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
