#pragma once
// The optimizer step over state that lives on disk (StateFiles): the shard is cut into groups of
// at most `group_floats` per stream, and the groups go through a pool of `slots` buffers, so
// that while group k is updated, groups k+1.. are being read and group k-1 written (IoRing).
// Memory: slots x streams x group_floats floats, whatever the model's size. The step knows no
// optimizer: it hands each group's state, one float array per stream, to a callback that
// updates elements [a, b) of a slice (any optimizer whose state is flat per-element streams:
// AdamW's two moments, Lion's one).
#include <cstdint>
#include <functional>
#include <span>

#include "weft/core/buffer.hpp"
#include "weft/offload/io_ring.hpp"
#include "weft/offload/state_files.hpp"

namespace weft::offload {

// What one pass moved and where its time went.
struct PassStats {
    int64_t read_bytes = 0, written_bytes = 0;
    double io_wait_s = 0;  // blocked on a transfer (the disk behind the callback)
    double work_s = 0;     // in the callback
    double total_s = 0;
    PassStats& operator+=(const PassStats& o);
};

// weft train's --offload-group-mb, which weft plan prices too.
inline constexpr double kDefaultGroupMb = 16;

// Bytes of the pool of `slots` groups of `group_floats` for `streams` state streams (what
// StreamedState allocates, and the memory count prices).
int64_t pool_bytes(int64_t group_floats, int streams, int slots = 3);

class StreamedState {
  public:
    // `state[s]` points at element a of the slice's stream s.
    using Work =
        std::function<void(int slice, int64_t a, int64_t b, std::span<float* const> state)>;

    StreamedState(StateFiles& files, int64_t group_floats, int slots = 3);

    // One pass over every group of every slice: read it from the files (when `read`), call
    // `work`, write it back (when `write`). A failed transfer throws naming the file, after
    // every transfer in flight has finished.
    PassStats run(bool read, bool write, const Work& work);

    int64_t group_floats() const { return group_; }
    // Bytes of the buffer pool.
    int64_t pool_bytes() const { return pool_.bytes(); }
    const StateFiles& files() const { return files_; }

  private:
    StateFiles& files_;
    int64_t group_;
    int slots_;
    Buffer pool_;
    IoRing ring_;
};

}  // namespace weft::offload
