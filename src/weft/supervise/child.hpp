#pragma once
// The supervised command as a process group of its own: started with extra environment
// variables, its stderr passed through (and its tail kept for the fault report), stopped as a
// whole (SIGTERM to the group, then SIGKILL after a grace period), and sent SIGTERM by the
// kernel if the supervisor dies without stopping it.
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace weft::supervise {

struct ExitStatus {
    int code = -1;   // exit code, or -1 if ended by a signal
    int signal = 0;  // the signal that ended it, or 0
    // "exit code 3" / "killed by signal 9 (Killed)".
    std::string describe() const;
    // As a shell reports it: the code, or 128 + signal.
    int shell_code() const { return signal ? 128 + signal : code; }
};

class Child {
  public:
    // Starts argv[0] (searched in PATH) with `env` added to this process's environment. Throws
    // weft::Error naming the command if it cannot be started.
    Child(const std::vector<std::string>& argv,
          const std::vector<std::pair<std::string, std::string>>& env);
    ~Child();
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    // Passes on what the command wrote to stderr, waiting for it at most `seconds`; then returns
    // its status if it has ended.
    std::optional<ExitStatus> poll(double seconds);
    // Ends the whole group: SIGTERM, then SIGKILL to whatever is left after `grace` seconds.
    // Returns the command's status.
    ExitStatus stop(double grace);
    // The last part of what the command wrote to stderr.
    const std::string& stderr_tail() const { return tail_; }
    pid_t pid() const { return pid_; }

  private:
    void drain(double seconds);

    pid_t pid_ = -1;
    int err_fd_ = -1;
    std::string tail_;
    std::optional<ExitStatus> status_;
};

}  // namespace weft::supervise
