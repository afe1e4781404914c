// The watchdog: bounded waits, and on expiry a status query to the other ranks so the message can
// name who is missing. Protocol (docs/comm.md):
//   query  (tag 1)  int64[2] {group index, operation number}          timed-out rank -> peer
//   reply  (tag 2)  int64[6] {group index, collectives started on that group,
//                             current op or -1, its group, its number, its peer}  peer -> asker
// on a duplicate of MPI_COMM_WORLD owned by the watchdog, so no user message can match them.
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "weft/comm/detail.hpp"
#include "weft/comm/mpi_env.hpp"

namespace weft::comm::detail {

namespace {

constexpr int kQueryTag = 1;
constexpr int kReplyTag = 2;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// How long to wait for answers: ranks that are waiting in weft::comm answer within a few
// milliseconds, so a fraction of the timeout is plenty, bounded so a long timeout stays useful.
double grace_for(double timeout) {
    return std::clamp(timeout / 4, 0.5, 5.0);
}

// Polls without sleeping for the first microseconds (short operations finish fast), then yields
// the core (ranks may outnumber cores), then sleeps with a short back-off.
class Backoff {
  public:
    // Returns true once the caller should do its slow-path checks (service, deadline).
    bool pause(double waited) {
        if (waited < 50e-6) return false;
        if (waited < 2e-3) {
            sched_yield();
            return false;
        }
        sleep_us_ = std::min(sleep_us_ * 2 + 10, 200);
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
        return true;
    }

  private:
    int sleep_us_ = 0;
};

std::string join_ranks(const std::vector<int>& ranks) {
    std::string out;
    for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
}

}  // namespace

void check_mpi(int code, const char* call, const std::string& context) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    abort_job(fmt::format("{} failed in {}: {}", call, context, std::string(text, length)));
}

Watchdog::Watchdog(Mesh& mesh, MPI_Comm world) : mesh_(mesh) {
    MPI_Request request;
    check_mpi(MPI_Comm_idup(world, &comm_, &request), "MPI_Comm_idup", "Mesh construction");
    auto start = Clock::now();
    Backoff backoff;
    for (int done = 0;;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done) break;
        double waited = seconds_since(start);
        if (backoff.pause(waited) && waited > mesh.timeout()) {
            abort_job(fmt::format("comm watchdog: not every one of the {} ranks reached Mesh "
                                  "construction within {} s (a rank exited early or hangs)",
                                  mesh.world_size(), mesh.timeout()),
                      kWatchdogExitCode);
        }
    }
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

Watchdog::~Watchdog() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Replies to ranks that have since moved on are complete or will complete; a reply still
    // pending would pin the communicator, so cancel it rather than wait.
    for (auto& r : replies_) {
        int done = 0;
        MPI_Test(&r->request, &done, MPI_STATUS_IGNORE);
        if (!done) {
            MPI_Cancel(&r->request);
            MPI_Request_free(&r->request);
        }
    }
    MPI_Comm_free(&comm_);
}

Clock::time_point Watchdog::wait(MPI_Request& request, const OpInfo& info, MPI_Status* status) {
    const OpInfo* outer = current_;
    current_ = &info;
    auto start = Clock::now();
    FlightRecorder& flight = Access::flight(mesh_);
    flight.block(info, start);
    Backoff backoff;
    for (int done = 0;;) {
        check_mpi(MPI_Test(&request, &done, status ? status : MPI_STATUS_IGNORE), "MPI_Test",
                  describe_op(info));
        if (done) break;
        double waited = seconds_since(start);
        if (!backoff.pause(waited)) continue;
        service();
        if (waited > mesh_.timeout()) expire(info, waited);
    }
    current_ = outer;
    const auto end = Clock::now();
    if (outer != nullptr) {
        flight.block(*outer, end);
    } else {
        flight.unblock(end);
    }
    return end;
}

void Watchdog::service() {
    std::erase_if(replies_, [](const std::unique_ptr<Reply>& r) {
        int done = 0;
        MPI_Test(&r->request, &done, MPI_STATUS_IGNORE);
        return done != 0;
    });
    for (;;) {
        int pending = 0;
        MPI_Status status;
        MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, comm_, &pending, &status);
        if (!pending) return;
        std::array<int64_t, 2> query{};
        MPI_Recv(query.data(), 2, MPI_INT64_T, status.MPI_SOURCE, kQueryTag, comm_,
                 MPI_STATUS_IGNORE);
        // Queries come only from a rank whose wait expired, and the job ends soon after: record
        // where this rank is now, as the ones that time out themselves do.
        if (!queried_) {
            queried_ = true;
            Access::flight(mesh_).dump(FlightReason::timeout, current_);
        }
        auto reply = std::make_unique<Reply>();
        auto groups = mesh_.groups();
        int64_t g = query[0];
        int64_t started =
            g >= 0 && g < int64_t(groups.size()) ? int64_t(Access::started(*groups[g])) : -1;
        reply->data = {g, started, -1, -1, -1, -1};
        if (current_ != nullptr) {
            reply->data[2] = int64_t(current_->op);
            reply->data[3] = current_->group;
            reply->data[4] = int64_t(current_->seq);
            reply->data[5] = current_->peer;
        }
        MPI_Isend(reply->data.data(), 6, MPI_INT64_T, status.MPI_SOURCE, kReplyTag, comm_,
                  &reply->request);
        replies_.push_back(std::move(reply));
    }
}

std::vector<Watchdog::Answer> Watchdog::ask(const std::vector<int>& ranks, const OpInfo& info,
                                            double grace) {
    std::array<int64_t, 2> query = {info.group, int64_t(info.seq)};
    std::vector<Answer> answers(ranks.size());
    std::vector<MPI_Request> sends(ranks.size()), recvs(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
        MPI_Isend(query.data(), 2, MPI_INT64_T, ranks[i], kQueryTag, comm_, &sends[i]);
        MPI_Irecv(answers[i].data.data(), 6, MPI_INT64_T, ranks[i], kReplyTag, comm_, &recvs[i]);
    }
    auto start = Clock::now();
    size_t answered = 0;
    while (answered < ranks.size() && seconds_since(start) < grace) {
        for (size_t i = 0; i < ranks.size(); ++i) {
            if (answers[i].answered) continue;
            int done = 0;
            MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE);
            if (done) answers[i].answered = true, ++answered;
        }
        service();  // the ranks we ask may be asking us at the same time
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The job ends right after this; requests left pending to silent ranks are not reclaimed.
    return answers;
}

std::string Watchdog::describe_op(const OpInfo& info) const {
    auto groups = mesh_.groups();
    std::string group = info.group >= 0 && info.group < int(groups.size())
                            ? std::string(groups[info.group]->name())
                            : "?";
    std::string what = fmt::format("{} B of {}", info.bytes, info.dtype);
    if (info.op == Op::send)
        return fmt::format("send of {} to rank {} on {}", what, info.peer, group);
    if (info.op == Op::recv)
        return fmt::format("recv of {} from rank {} on {}", what, info.peer, group);
    return fmt::format("{} #{} on {} ({}, {} ranks)", op_name(info.op), info.seq, group, what,
                       groups[info.group]->size());
}

std::string Watchdog::describe_state(const std::array<int64_t, 6>& reply) const {
    if (reply[2] < 0) return "not blocked in weft::comm";
    auto groups = mesh_.groups();
    std::string group = reply[3] >= 0 && reply[3] < int64_t(groups.size())
                            ? std::string(groups[reply[3]]->name())
                            : "?";
    Op op = Op(reply[2]);
    if (op == Op::send || op == Op::recv)
        return fmt::format("blocked in {} with rank {} on {}", op_name(op), reply[5], group);
    return fmt::format("blocked in {} #{} on {}", op_name(op), reply[4], group);
}

void Watchdog::expire(const OpInfo& info, double waited) {
    const int me = mesh_.world_rank();
    const bool p2p = info.peer >= 0;
    const double grace = grace_for(mesh_.timeout());
    // First, while every waiting rank is surely still alive: the reporter's abort ends them all.
    FlightRecorder& flight = Access::flight(mesh_);
    const bool dumped = flight.dump(FlightReason::timeout, &info);
    std::vector<int> targets;
    if (p2p) {
        targets.push_back(info.peer);
    } else {
        for (int r : mesh_.groups()[info.group]->members()) {
            if (r != me) targets.push_back(r);
        }
    }
    std::vector<Answer> answers = ask(targets, info, grace);

    // Sort the asked ranks into those that have not reached the operation (with why) and those
    // that have; remember which of the latter are stuck in it with us, to elect one reporter.
    std::vector<int> missing, arrived = {me};
    std::string details;
    int reporter = me;
    for (size_t i = 0; i < targets.size(); ++i) {
        const int r = targets[i];
        const Answer& a = answers[i];
        std::string who = fmt::format("rank {} ({})", r, mesh_.describe_rank(r));
        if (!a.answered) {
            missing.push_back(r);
            details += fmt::format(
                "\n  {}: no answer within {:.2f} s (hung, busy outside "
                "weft::comm, or dead)",
                who, grace);
            continue;
        }
        const bool waiting = a.data[2] >= 0;
        bool reached;
        if (p2p) {
            const Op want = info.op == Op::send ? Op::recv : Op::send;
            reached = a.data[2] == int64_t(want) && a.data[3] == info.group && a.data[5] == me;
        } else {
            reached = a.data[1] > int64_t(info.seq);
        }
        if (reached) {
            arrived.push_back(r);
        } else {
            missing.push_back(r);
            std::string progress =
                p2p ? std::string("not in the matching call")
                    : fmt::format("has started {} collectives on this group, this is #{}",
                                  a.data[1], info.seq);
            details += fmt::format("\n  {}: {}; {}", who, progress, describe_state(a.data));
        }
        if (waiting) reporter = std::min(reporter, r);
    }
    std::sort(arrived.begin(), arrived.end());
    std::string message = fmt::format(
        "comm watchdog: {} blocked for {:.2f} s (timeout {} s); missing: {}{}\n  arrived: rank {}",
        describe_op(info), waited, mesh_.timeout(),
        missing.empty() ? "none (all arrived; the operation itself stalled)"
                        : "rank " + join_ranks(missing),
        details, join_ranks(arrived));
    if (dumped) message += fmt::format("\n  flight recorder dumps: {}/rank_*.json", flight.dir());

    // Every rank stuck in the operation times out at about the same moment; the lowest of them
    // reports and aborts, the others wait a while for that abort so the job prints one message.
    if (reporter != me) {
        auto start = Clock::now();
        while (seconds_since(start) < 2 * grace + 1) {
            service();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    abort_job(message, kWatchdogExitCode);
}

}  // namespace weft::comm::detail
