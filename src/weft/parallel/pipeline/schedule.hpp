#pragma once
// Pipeline schedules as data: for each pipeline rank, the ordered list of actions it performs in
// one training step. Generators here know nothing of layers or MPI; one executor runs any list that
// `validate` accepts and `simulate` (simulator.hpp) finds free of deadlock. See docs/pipeline.md.
//
// Model chunks: the model is cut into pp * vpp chunks of consecutive layers, numbered 0..pp*vpp-1
// in the order the forward pass visits them. Chunk c lives on rank c % pp, so with interleaving
// (vpp > 1) rank r holds chunks r, r + pp, r + 2pp, ...; except in a V (zb-v: vpp = 2), where
// rank r holds chunks r and 2pp - 1 - r, so that the last chunk, and the loss, sit on rank 0
// beside the first, and the turn of the V (chunks pp - 1 and pp) hands over in memory.
//
// Backward is one action (backward) or, in the zero-bubble schedules (Qi et al. 2024), two:
// backward_input (B: the gradient of the chunk's input, on the critical path, sent on at once)
// and backward_weight (W: the weights' gradients, which nothing downstream waits for, so W can
// fill what would be bubbles). A chunk's W of a micro-batch comes after its B; the W's of a chunk
// run in micro-batch order, as the B's do, so the gradients accumulate in the fused order.
//
// Placement of messages (the contract with the executor):
// - recv_act (micro, c) comes immediately before forward (micro, c), recv_grad (micro, c)
//   immediately before backward (micro, c). A recv action is the point by which the data must
//   have arrived; the executor may post its MPI_Irecv as early as it likes (e.g. at step start).
// - send_act (micro, c) comes immediately after forward (micro, c), send_grad (micro, c)
//   immediately after backward (micro, c). A send never blocks: the executor posts MPI_Isend
//   there and waits for its completion only when the buffer is reused or at step end.
// - On send_* and recv_* the chunk is the local chunk (the producer for a send, the consumer for
//   a recv) and peer is the rank at the other end. Messages exist only between different ranks:
//   consecutive chunks on the same rank (pp == 1) hand over in memory.
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/layout.hpp"

namespace weft::pipeline {

// The kinds live in core, so that a Layout can hold one.
using weft::format_schedule_kind;
using weft::parse_schedule_kind;
using weft::ScheduleKind;
using weft::splits_backward;

// Where a schedule places its chunks: the one answer the schedules, the partition of the layers,
// the trainer's estimate and the planner read.
// Whether the schedule's chunks lie in a V (zb-v).
inline bool places_in_vee(ScheduleKind kind) {
    return kind == ScheduleKind::zb_v;
}
// The rank of chunk c: c % pp, or in a V (`vee`, two chunks per rank) c or 2pp - 1 - c.
inline int chunk_owner(int chunk, int pp, bool vee) {
    return vee && chunk >= pp ? 2 * pp - 1 - chunk : chunk % pp;
}
// The chunks rank r holds, in forward order: r, r + pp, ... (in a V: r, 2pp - 1 - r).
std::vector<int> rank_chunks(int rank, int pp, int vpp, bool vee);
// The same for a layout's pp, vpp and schedule.
inline int chunk_owner(int chunk, const Layout& l) {
    return chunk_owner(chunk, l.pp, places_in_vee(l.pp_schedule));
}
inline std::vector<int> rank_chunks(int rank, const Layout& l) {
    return rank_chunks(rank, l.pp, l.vpp, places_in_vee(l.pp_schedule));
}

struct Costs;  // simulator.hpp

struct Action {
    enum Kind {
        forward,
        backward,
        send_act,
        recv_act,
        send_grad,
        recv_grad,
        backward_input,
        backward_weight
    } kind;
    int micro;      // micro-batch index, 0..micro_batches-1
    int chunk;      // model chunk index, 0..pp*vpp-1
    int peer = -1;  // rank at the other end of a send/recv; -1 for compute

    bool is_compute() const {
        return kind == forward || kind == backward || kind == backward_input ||
               kind == backward_weight;
    }
    // The backward that produces the input's gradient: the fused one or B.
    bool is_input_backward() const { return kind == backward || kind == backward_input; }
    bool is_send() const { return kind == send_act || kind == send_grad; }
    bool is_recv() const { return kind == recv_act || kind == recv_grad; }
    bool operator==(const Action&) const = default;
};

std::string_view format_action_kind(Action::Kind kind);
// "forward m3 c5", "recv_act m3 c5 from 1", "send_grad m3 c5 to 0".
std::string format_action(const Action& a);

struct Schedule {
    int pp = 1, vpp = 1, micro_batches = 1;
    ScheduleKind kind = ScheduleKind::one_f_one_b;
    std::vector<std::vector<Action>> ranks;  // ranks[r] = actions of pipeline rank r, in order

    int chunks() const { return pp * vpp; }
    int owner(int chunk) const { return chunk_owner(chunk, pp, places_in_vee(kind)); }
    // Whether backward comes as B and W (the zero-bubble kinds).
    bool split_backward() const { return splits_backward(kind); }
};

// Identifies a point-to-point message independently of which side names it: the activation or
// gradient of `micro` crossing the boundary between chunks `boundary` and `boundary + 1`, going
// from rank `src` to rank `dst`. Both the simulator and the executor (for its MPI tags) key on it.
struct MessageId {
    bool grad;
    int micro, boundary, src, dst;
    auto operator<=>(const MessageId&) const = default;
};
// For a send or recv action executed by `rank`.
MessageId message_id(const Action& a, int rank);

// Builds the schedule; throws weft::Error for pp < 1, vpp < 1, micro_batches < 1, more than 2^20
// (micro-batch, chunk) pairs (pp x vpp x micro_batches), vpp != 1 with gpipe or 1f1b, and for
// interleaved unless micro_batches % pp == 0 and micro_batches >= pp.
// - gpipe: all forwards in micro-batch order, then all backwards in the same (FIFO) order.
// - 1f1b: pp - rank - 1 warm-up forwards, then alternate one forward and one backward, then
//   cool-down backwards (Megatron's forward_backward_pipelining_without_interleaving).
// - interleaved: Megatron's forward_backward_pipelining_with_interleaving (Narayanan et al. 2021):
//   virtual micro-batches walk groups of pp micro-batches through chunk 0, 1, ... of the rank;
//   warm-up of min((pp - rank - 1) * 2 + (vpp - 1) * pp, vpp * m) forwards, then 1F1B, then
//   cool-down backwards.
// - zb-h1 and zb-v (zero_bubble.cpp): list schedules of F, B and W found by running the pipeline
//   at `costs` (without them, unit costs: F = B = W, as the paper's hand-made schedules assume)
//   and taking at each free moment a ready B, else a forward if the rank holds fewer activations
//   than its limit, else the oldest W: zb-h1 with 1F1B's peak as every rank's limit (pp
//   micro-batches; or 1F1B's own order with W after each B, whichever simulate() finds faster),
//   zb-v in a V with vpp = 2 and the limit 2pp chunks (pp micro-batches of a whole stage).
// The other kinds ignore `costs`. A schedule is a function of its arguments only: every rank
// that builds it from the same costs holds the same lists.
Schedule make_schedule(ScheduleKind kind, int pp, int vpp, int micro_batches);
Schedule make_schedule(ScheduleKind kind, int pp, int vpp, int micro_batches, const Costs& costs);

// Appends a compute action to rank r's list with the messages around it, placed as above:
// receive right before, send right after (none around a backward_weight). For generators.
void append_compute(Schedule& s, int r, Action::Kind kind, int micro, int chunk);
// Fills s.ranks for a zero-bubble kind at `costs` (zero_bubble.cpp).
void fill_zero_bubble(Schedule& s, const Costs& costs);

// Checks the structure of a schedule; throws weft::Error naming the first violation:
// - every (micro, chunk) has exactly one forward and one backward (split schedules: one
//   backward_input and, after it, one backward_weight), on the chunk's owner;
// - split schedules: on each chunk, backward_input and backward_weight in micro-batch order;
// - on each rank, forward (m, c) precedes backward (m, c); where chunks c and c + 1 share a rank,
//   forward (m, c) precedes forward (m, c + 1) and backward (m, c + 1) precedes backward (m, c);
// - where they do not, the rank holding c has send_act (m, c) after forward (m, c) and the rank
//   holding c + 1 has recv_act (m, c + 1) before forward (m, c + 1); likewise for gradients;
// - there are no other sends or receives, and each message is sent once and received once.
// Together these make forward of c happen before forward of c + 1 (and backward in reverse) in
// any run; whether a run completes at all is what simulate() decides.
void validate(const Schedule& s);

}  // namespace weft::pipeline
