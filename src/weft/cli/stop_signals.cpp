#include "weft/cli/stop_signals.hpp"

#include <unistd.h>

#include <cerrno>

#include "weft/core/error.hpp"

namespace weft::cli {

namespace {

// One StopSignals at a time: the handler knows no object.
int pipe_fds[2] = {-1, -1};

extern "C" void write_stop_signal(int sig) {
    const int saved = errno;
    const unsigned char c = static_cast<unsigned char>(sig);
    (void)!write(pipe_fds[1], &c, 1);
    errno = saved;
}

}  // namespace

StopSignals::StopSignals(bool ignore) {
    WEFT_CHECK(pipe(pipe_fds) == 0, "cannot make the pipe of the stop signals: errno {}", errno);
    struct sigaction sa {};
    sa.sa_handler = ignore ? SIG_IGN : write_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
}

StopSignals::~StopSignals() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    pipe_fds[0] = pipe_fds[1] = -1;
}

int StopSignals::wait() {
    unsigned char c = 0;
    while (read(pipe_fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    return c;
}

void StopSignals::wake() {
    const unsigned char c = 0;
    (void)!write(pipe_fds[1], &c, 1);
}

}  // namespace weft::cli
