#pragma once
// Runs one pipeline rank's actions of a schedule: compute through a StageWork the caller
// supplies, messages as non-blocking point-to-point operations on the pipeline group. It knows
// no layers; the stage knows no schedule. Any schedule that validate() accepts and simulate()
// finds free of deadlock runs here, since the executor keeps the simulator's promises: a send is
// posted where the list puts it and never blocks; a recv blocks until its message has arrived.
#include <cstdint>
#include <span>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/parallel/pipeline/schedule.hpp"
#include "weft/parallel/pipeline/trace.hpp"

namespace weft::pipeline {

class StageWork {
  public:
    virtual ~StageWork() = default;
    virtual void forward(int micro, int chunk) = 0;
    virtual void backward(int micro, int chunk) = 0;
    // The zero-bubble schedules' halves of backward: B, the gradient of the chunk's input (then
    // sent from grad_out), and W, the weights' gradients. B then W must give the fused
    // backward's gradients bit for bit.
    virtual void backward_input(int micro, int chunk) = 0;
    virtual void backward_weight(int micro, int chunk) = 0;
    // Message buffers of (micro, chunk), valid from the call until the message is done:
    // where the chunk's input activation is received, where its output is sent from, where the
    // gradient of its output is received and where the gradient of its input is sent from.
    virtual std::span<float> act_in(int micro, int chunk) = 0;
    virtual std::span<const float> act_out(int micro, int chunk) = 0;
    virtual std::span<float> grad_in(int micro, int chunk) = 0;
    virtual std::span<const float> grad_out(int micro, int chunk) = 0;
};

struct ExecutorOptions {
    bool record = false;  // keep a measured timeline of the step
    // Messages travel as bf16 (--dtype bf16): rounded into a scratch buffer held until the send
    // completes, received into one and widened into the stage's fp32 buffer (bf16_wire.hpp).
    bool bf16_messages = false;
};

// One step of `rank`'s list on the pipeline group `pp` (group rank = pipeline rank). Returns the
// measured timeline when recording (times from the step's start on this rank, in us; the
// record's rank is the pipeline rank), else nothing.
std::vector<TraceRecord> run_schedule(const Schedule& s, int rank, comm::Group& pp, StageWork& work,
                                      ExecutorOptions options = {});

// MPI tag of a message: distinct for every message of a step (0..32767).
int message_tag(const MessageId& id, const Schedule& s);

}  // namespace weft::pipeline
