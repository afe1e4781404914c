#include "weft/parallel/pipeline/executor.hpp"

#include <time.h>

#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "weft/comm/collectives.hpp"
#include "weft/comm/tags.hpp"
#include "weft/core/error.hpp"
#include "weft/parallel/bf16_wire.hpp"

namespace weft::pipeline {

int message_tag(const MessageId& id, const Schedule& s) {
    // Each (direction, micro, boundary) is one message; tags number them densely.
    const int boundaries = s.chunks() - 1;
    const int tag = ((id.grad ? 1 : 0) * s.micro_batches + id.micro) * boundaries + id.boundary;
    WEFT_CHECK(tag < comm::tags::kPipelineStep.end(),
               "a pipeline step of {} micro-batches over {} chunks has more messages than MPI "
               "tags allow; use fewer micro-batches",
               s.micro_batches, s.chunks());
    return comm::tags::kPipelineStep.at(tag);
}

namespace {

// This thread's CPU time: with one thread a rank, an action's own work, whatever share of a core
// the rank had meanwhile. The work of other OpenMP threads is not in it.
double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

}  // namespace

std::vector<TraceRecord> run_schedule(const Schedule& s, int rank, comm::Group& pp, StageWork& work,
                                      ExecutorOptions options) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    auto now_us = [&] {
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    };
    std::vector<TraceRecord> records;
    double start_cpu = 0;
    auto record = [&](const Action& a, double start, const char* category) {
        if (options.record)
            records.push_back({rank, format_action(a), category, start, now_us() - start,
                               thread_cpu_us() - start_cpu});
    };
    // Sends in flight, by (grad, micro, chunk): an activation's send is awaited before the
    // chunk's backward (which may rewrite the buffer when recomputing), the rest at step end.
    struct Send {
        comm::Request request;
        std::vector<uint16_t> wire;  // the bf16 message, until it is sent
    };
    std::map<std::tuple<bool, int, int>, Send> sends;
    std::vector<uint16_t> received;  // a bf16 message, widened at once
    for (const Action& a : s.ranks[size_t(rank)]) {
        const double start = now_us();
        if (options.record) start_cpu = thread_cpu_us();
        switch (a.kind) {
            case Action::forward:
                work.forward(a.micro, a.chunk);
                record(a, start, "forward");
                break;
            case Action::backward:
            case Action::backward_input: {
                auto it = sends.find({false, a.micro, a.chunk});
                if (it != sends.end()) {
                    it->second.request.wait();
                    sends.erase(it);
                }
                if (a.kind == Action::backward) {
                    work.backward(a.micro, a.chunk);
                    record(a, start, "backward");
                } else {
                    work.backward_input(a.micro, a.chunk);
                    record(a, start, "backward_input");
                }
                break;
            }
            case Action::backward_weight:
                work.backward_weight(a.micro, a.chunk);
                record(a, start, "backward_weight");
                break;
            case Action::send_act:
            case Action::send_grad: {
                const bool grad = a.kind == Action::send_grad;
                std::span<const float> data =
                    grad ? work.grad_out(a.micro, a.chunk) : work.act_out(a.micro, a.chunk);
                const int tag = message_tag(message_id(a, rank), s);
                Send& out = sends[{grad, a.micro, a.chunk}];
                if (options.bf16_messages) {
                    const int64_t n = int64_t(data.size());
                    out.wire.resize(size_t(n));
                    parallel::round_to_bf16(out.wire.data(), data.data(), n);
                    out.request = comm::send_async(
                        pp, parallel::wire_bytes(std::as_const(out.wire), 0, n), a.peer, tag);
                } else {
                    out.request = comm::send_async(pp, data, a.peer, tag);
                }
                record(a, start, "send");
                break;
            }
            case Action::recv_act:
            case Action::recv_grad: {
                const bool grad = a.kind == Action::recv_grad;
                std::span<float> data =
                    grad ? work.grad_in(a.micro, a.chunk) : work.act_in(a.micro, a.chunk);
                const int tag = message_tag(message_id(a, rank), s);
                if (options.bf16_messages) {
                    const int64_t n = int64_t(data.size());
                    received.resize(size_t(n));
                    comm::recv(pp, parallel::wire_bytes(received, 0, n), a.peer, tag);
                    parallel::widen_bf16(data.data(), received.data(), n);
                } else {
                    comm::recv(pp, data, a.peer, tag);
                }
                record(a, start, "recv");
                break;
            }
        }
    }
    for (auto& [key, send] : sends) send.request.wait();
    return records;
}

}  // namespace weft::pipeline
