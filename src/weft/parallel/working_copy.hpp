#pragma once
// The working copy of `--offload optimizer|optimizer+params` (docs/memory.md): the fp32 master
// weights live with the moments in the offload files, and the copy holds the weights and the
// gradients the model reads and writes, each tensor as bf16 when every use of it rounds it to
// bf16 anyway (the block matrices, read only by the bf16 products: rounding them once here gives
// the products the bits they would round from the master) and as fp32 otherwise (embeddings,
// norms, biases, which are read in fp32). A unit the model asks for is widened into an fp32
// temporary (released after use, as a ZeRO-3 gather is); a unit of fp32 tensors only is handed
// out in place. Gradients of a unit accumulate in an fp32 temporary over its backward and are
// added into the stored copy when the unit is ready: a bf16 gradient is rounded once per
// micro-batch.
//
// Each unit's weights (and its gradients) are one record, its tensors in order. In memory
// (`--offload optimizer`) the records are one buffer. In files (`--offload optimizer+params`,
// ZeRO-3 style) they are a weights file and a gradients file (offload::StateFiles, a record per
// slice) and memory holds a few: a unit's record is read when the model asks for it and the
// next one's is read ahead in the pass's direction (forward: the next unit, backward: the one
// before), and a unit's gradient record is written behind once ready, through one io_uring with
// O_DIRECT (offload::IoRing), as the optimizer's state streams. The optimizer's pass reads and
// writes the records through a cursor of one unit, the next unit's gradients read ahead of it
// and the last unit's weights written behind; weights it overwrites whole are not read first.
//
// In memory, the optimizer's pass may run behind the next step's forward (fence()): a unit's
// weights are handed out once the pass has written them, and the step's zeroing of a unit's
// gradients waits until the pass has read them.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/params.hpp"
#include "weft/offload/io_ring.hpp"
#include "weft/offload/state_files.hpp"
#include "weft/offload/streamed_state.hpp"
#include "weft/parallel/buffer_pool.hpp"
#include "weft/parallel/update_fence.hpp"

namespace weft::parallel {

// Whether the working copy keeps tensor `t` of `layout` as bf16: a matrix of a transformer
// block (not the embeddings, the final norm or a head, not a vector, not an expert's).
bool kept_bf16(const model::ParamLayout& layout, const model::ParamSpec& t);

class WorkingCopy {
  public:
    // Over the whole padded buffer `layout` (which must outlive it); temporaries from `pool`.
    // `bf16`: the kept_bf16 tensors as bf16, else every tensor fp32 (fp32 gradients: the copy
    // then only moves the weights to disk). `dir`: in files there, named for `rank`; empty: in
    // memory. Without `gradients` (a zeroth-order optimizer) only the weights are kept.
    WorkingCopy(const model::ParamLayout& layout, BufferPool& pool, bool bf16 = true,
                const std::filesystem::path& dir = {}, int rank = 0, bool gradients = true);
    ~WorkingCopy();
    WorkingCopy(const WorkingCopy&) = delete;
    WorkingCopy& operator=(const WorkingCopy&) = delete;

    // Bytes of the stored weights (the gradients take as many) for `layout`: in files, each
    // file's size less its header.
    static int64_t stored_bytes(const model::ParamLayout& layout, bool bf16 = true);
    // In files: bytes of the weights' records memory holds at most, and of the gradients' as
    // many: an end unit's (the embedding, held through the forward when the head is tied to it,
    // its gradient from the head's forward to the embedding's backward; or an untied head's)
    // and two blocks' (the one in use and the one read ahead, or written behind).
    static int64_t resident_bytes(const model::ParamLayout& layout, bool bf16 = true);
    // Floats of the largest unit that is widened (its temporary), 0 if none is.
    static int64_t widened_floats(const model::ParamLayout& layout, bool bf16 = true);

    // The model's access (model::UnitAccess): the unit's fp32 weights until release, its fp32
    // gradient until grads_ready adds it into the stored gradients.
    // `reduce` (data parallelism: sums n floats over the ranks in place) is applied to the
    // unit's gradient before it is stored: to a widened unit's every micro-batch, to a unit
    // kept in place on the last only (`last_micro_batch`), where its sum is whole.
    using Reduce = std::function<void(float* data, int64_t n)>;
    float* params(int unit);
    float* grads(int unit);
    void release(int unit);
    void grads_ready(int unit, const Reduce& reduce = {}, bool last_micro_batch = true);
    void zero_grads();
    // The pass about to run (forward, or backward): in files, the unit read ahead is the next
    // one, or the one before.
    void set_forward(bool forward);

    // In memory: the optimizer's pass that runs behind the forward advances it through the
    // padded buffer (UpdateFence::open before, advance after each write_params, close after).
    UpdateFence& fence() { return fence_; }
    // Seconds the model waited for that pass since the last call.
    double take_blocked_s() { return std::exchange(blocked_s_, 0.0); }

    // Elements [begin, begin + n) of the padded buffer as fp32 (padding as zeros), and the
    // weights set from fp32 (rounded where kept as bf16).
    void read_params(int64_t begin, int64_t n, float* out);
    void read_grads(int64_t begin, int64_t n, float* out);
    void write_params(int64_t begin, int64_t n, const float* in);
    // kernels::sum_squares of grads [begin, begin + n) as fp32, bit for bit as one call on them.
    double grad_sum_squares(int64_t begin, int64_t n);
    // In files: writes what write_params changed (and waits for it: before the model reads it
    // again).
    void flush();
    // The end of the unit holding element `at` of the padded buffer: the range operations above
    // keep within one unit to read and write each record once (in files).
    int64_t unit_end(int64_t at) const;

    // In files: the files, and what they moved (and the time blocked on them) since the last
    // call; null and nothing in memory.
    const offload::StateFiles* files() const { return files_.get(); }
    offload::PassStats take_io_stats();

  private:
    // f(tensor index, lo, hi) for the part [lo, hi) of every tensor overlapping [begin, end).
    template <class F>
    void for_pieces(int64_t begin, int64_t end, F f) const;
    void read(bool grads, int64_t begin, int64_t n, float* out);
    float* widen(int unit, const std::byte* record);
    // The unit's record in the store (in memory), or the cursor's (in files). `overwrite`: the
    // caller writes the weights it asks for, so a record not loaded yet is not read (unless a
    // read or the cursor's move finds part of it unwritten: merge_weights).
    std::byte* record(int unit, bool grads, bool overwrite = false);
    // In files: moves the cursor off its unit, its changed weights written behind (at most one
    // such write in flight: the one before is waited for).
    void leave_cursor();
    // In files: the cursor's weights taken without reading them, complete: what write_params
    // did not write comes from the file.
    void merge_weights();
    // In files: starts reading the gradient record of `unit` ahead of the cursor.
    void grads_ahead(int unit);
    void drop_grads_ahead();
    // In files: a pool buffer for a unit's record (zeroed or not).
    Buffer take_record(int unit, bool zeroed);
    // In files: starts the transfer `kind` (kRead/kWrite + kWeights/kGrads) of a unit's record
    // from or into `buf`, after the transfers of the same record before it; waits for one.
    void start(int unit, int kind, Buffer& buf);
    void wait(int unit, int kind);
    void reap();
    void done(const offload::IoRing::Completion& c);
    void read_ahead(int unit);
    void drop_ahead();
    void write_grads(int unit, Buffer rec);
    // In memory, with the pass behind: waits until it has written the unit's weights, or read
    // its gradients, and zeroes them if the step's zeroing is still owed.
    void await_update(int unit);
    void claim_grads(int unit);
    void settle_grads();

    const model::ParamLayout& layout_;
    BufferPool& pool_;
    std::vector<int64_t> tensor_at_;             // per tensor: byte offset in its unit's record
    std::vector<bool> half_;                     // per tensor: stored as bf16
    std::vector<bool> in_place_;                 // per unit: all fp32, its record the unit's floats
    std::vector<int64_t> unit_bytes_, unit_at_;  // per unit: its record's size and place
    std::vector<int64_t> unit_numel_;            // per unit: floats of its tensors
    Buffer store_, gstore_;                      // in memory: every record
    std::vector<Buffer> temp_, gtemp_;  // per unit: widened weights, accumulating gradients
    bool forward_ = true;
    UpdateFence fence_;
    double blocked_s_ = 0;
    std::vector<uint8_t> zero_owed_;  // per unit: zero_grads ran while the pass read them
    int64_t owed_ = 0;
    // In files.
    std::unique_ptr<offload::StateFiles> files_;
    std::vector<Buffer> ahead_, wout_, gout_;  // per unit: read ahead, written behind
    std::vector<int> busy_;                    // per unit and kind: requests in flight
    std::vector<uint8_t> has_grads_;           // per unit: its gradient record written this step
    int cursor_ = -1;
    bool cursor_w_ = false, cursor_g_ = false, dirty_ = false;  // records read; weights changed
    Buffer cur_w_, cur_g_;
    // The cursor's weights taken unread, and the ranges (of the padded buffer) written into them.
    bool cur_w_fresh_ = false;
    std::vector<std::pair<int64_t, int64_t>> written_;
    int behind_ = -1;  // the unit whose weights the cursor left being written
    Buffer gahead_;    // the gradient record read ahead of the cursor, of unit gahead_unit_
    int gahead_unit_ = -1;
    offload::PassStats io_;
    std::unique_ptr<offload::IoRing> ring_;  // last, so destroyed first: it waits for transfers
};

}  // namespace weft::parallel
