#include "weft/comm/flight_signals.hpp"

#include <errno.h>
#include <signal.h>
#include <time.h>

#include <atomic>

#include "weft/comm/flight_recorder.hpp"

namespace weft::comm {

namespace {

constexpr long kTermPauseNs = 800'000'000;

std::atomic<FlightRecorder*> g_recorder{nullptr};
struct sigaction g_old_term, g_old_usr1;

// Only async-signal-safe calls: the recorder's dump formats plain data and uses open, write,
// rename; nanosleep, sigaction and raise are on POSIX's list.
void on_signal(int sig) {
    const int saved_errno = errno;
    if (FlightRecorder* r = g_recorder.load(std::memory_order_acquire))
        r->dump_now(FlightReason::signal);
    if (sig == SIGTERM) {
        // Open MPI's mpirun sends SIGTERM to every rank and may SIGKILL the rest as soon as the
        // first one dies (measured: 0.6 ms later), so a rank that the scheduler runs late (on a
        // loaded host, hundreds of ms) would be killed before or during its dump. Every rank
        // pauses before dying, so all finish theirs; still under mpirun's own 1 s between
        // SIGTERM and SIGKILL, so no job ends later for it.
        const timespec pause = {0, kTermPauseNs};
        nanosleep(&pause, nullptr);
        // SIGTERM is blocked while we run; raised again it is delivered on return, with the
        // default action, so the process ends by SIGTERM as its parent expects.
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGTERM, &dfl, nullptr);
        raise(SIGTERM);
    }
    errno = saved_errno;
}

}  // namespace

void install_flight_signals(FlightRecorder& recorder) {
    FlightRecorder* before = g_recorder.exchange(&recorder, std::memory_order_acq_rel);
    if (before != nullptr) return;  // handlers already in place; they now dump this recorder
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGUSR1, &sa, &g_old_usr1);
}

void remove_flight_signals(FlightRecorder& recorder) {
    FlightRecorder* expected = &recorder;
    if (!g_recorder.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return;
    sigaction(SIGTERM, &g_old_term, nullptr);
    sigaction(SIGUSR1, &g_old_usr1, nullptr);
}

}  // namespace weft::comm
