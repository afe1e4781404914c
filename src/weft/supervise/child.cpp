#include "weft/supervise/child.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "weft/core/error.hpp"

namespace weft::supervise {

namespace {

constexpr size_t kTailBytes = 64 << 10;

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

std::string ExitStatus::describe() const {
    if (signal) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
    return fmt::format("exit code {}", code);
}

Child::Child(const std::vector<std::string>& argv,
             const std::vector<std::pair<std::string, std::string>>& env) {
    int err[2], exec_err[2];
    WEFT_CHECK(pipe2(err, O_CLOEXEC) == 0 && pipe2(exec_err, O_CLOEXEC) == 0,
               "weft run: cannot create a pipe: {}", std::strerror(errno));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t supervisor = getpid();
    pid_ = fork();
    WEFT_CHECK(pid_ >= 0, "weft run: fork failed: {}", std::strerror(errno));
    if (pid_ == 0) {
        // Its own group, so that stopping it reaches mpirun and every rank it started, and a
        // terminal's Ctrl-C reaches the supervisor, which then stops the job itself.
        setpgid(0, 0);
        // A supervisor that cannot stop the job (SIGKILL) still ends it: SIGTERM, which mpirun
        // passes on to its ranks, rather than SIGKILL, which would leave them behind. Checked
        // after setting it: a supervisor that died before that sends nothing.
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != supervisor) _exit(128 + SIGTERM);
        dup2(err[1], STDERR_FILENO);
        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
        signal(SIGPIPE, SIG_DFL);
        execvp(args[0], args.data());
        const int e = errno;
        ssize_t ignored = write(exec_err[1], &e, sizeof(e));
        (void)ignored;
        _exit(127);
    }
    setpgid(pid_, pid_);  // also here: the group must exist before we might signal it
    close(err[1]);
    close(exec_err[1]);
    int e = 0;
    const bool exec_failed = read(exec_err[0], &e, sizeof(e)) == sizeof(e);
    close(exec_err[0]);
    if (exec_failed) {
        close(err[0]);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        fail("weft run: cannot run '{}': {}", argv[0], std::strerror(e));
    }
    err_fd_ = err[0];
    fcntl(err_fd_, F_SETFL, O_NONBLOCK);
}

Child::~Child() {
    if (pid_ > 0 && !status_) stop(1.0);
    if (err_fd_ >= 0) close(err_fd_);
}

void Child::drain(double seconds) {
    if (err_fd_ < 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
        return;
    }
    pollfd p{err_fd_, POLLIN, 0};
    if (::poll(&p, 1, int(seconds * 1000)) <= 0) return;
    char buf[4096];
    for (;;) {
        const ssize_t n = read(err_fd_, buf, sizeof(buf));
        if (n == 0) {  // every writer has closed it
            close(err_fd_);
            err_fd_ = -1;
            return;
        }
        if (n < 0) return;
        ssize_t ignored = write(STDERR_FILENO, buf, size_t(n));
        (void)ignored;
        tail_.append(buf, size_t(n));
        if (tail_.size() > 2 * kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
    }
}

std::optional<ExitStatus> Child::poll(double seconds) {
    drain(seconds);
    if (status_) return status_;
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) != pid_) return std::nullopt;
    ExitStatus s;
    if (WIFSIGNALED(wstatus)) s.signal = WTERMSIG(wstatus);
    if (WIFEXITED(wstatus)) s.code = WEXITSTATUS(wstatus);
    status_ = s;
    drain(0);
    return status_;
}

ExitStatus Child::stop(double grace) {
    // The group outlives its leader while any member lives: signal it even after the command
    // itself has ended, so no rank is left behind.
    kill(-pid_, SIGTERM);
    const double until = now_s() + grace;
    while (now_s() < until) {
        poll(0.02);
        if (status_ && kill(-pid_, 0) != 0) break;
    }
    kill(-pid_, SIGKILL);
    while (!status_) poll(0.02);
    return *status_;
}

}  // namespace weft::supervise
