#pragma once
// The optimizer step over state that lives on disk (StateFiles): the shard is cut into groups of
// at most `group_floats` elements, and the groups go through a pool of `slots` buffers, so that
// while group k is updated, groups k+1.. are being read and group k-1 written (IoRing).
// Memory: slots x one group's bytes of every stream, whatever the model's size. The step knows
// no optimizer: the state's shape comes as a StateShape (for each stream, where an element's
// bytes start; where a group may be cut), and each group's bytes, one array per stream, go to a
// callback that updates elements [a, b) of a slice. So any optimizer whose state is flat byte
// buffers streams: AdamW's two fp32 moments, Lion's one, 8-bit AdamW's codes of m and v (a byte
// per element, fp32 where it keeps a tensor fp32) and absmaxes (8 bytes per block of 2048, cut at
// blocks only), and the fp32 master weights beside any of them.
//
// On disk each group of each stream is a record of its own (StateFiles), so that direct I/O
// moves a group whatever the alignment of its bytes in the optimizer's layout; in memory a
// group's array of a stream starts at the same offset modulo 16 as in that layout.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/offload/io_ring.hpp"
#include "weft/offload/state_files.hpp"

namespace weft::offload {

// The layout of the state of each slice: an optimizer's state_offset and align_down.
struct StateShape {
    std::vector<int64_t> slice_size;  // elements of each slice
    int streams = 0;
    // Byte of stream s where element a (a boundary, or the slice's size) of a slice starts.
    std::function<int64_t(int slice, int stream, int64_t a)> offset;
    // The largest boundary at or below a at which a group may be cut.
    std::function<int64_t(int slice, int64_t a)> align_down;
    // Every stream fp32, one value per element, cut anywhere (AdamW, Lion, the master).
    static StateShape fp32(std::vector<int64_t> slice_size, int streams);
};

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

// Bytes of the pool of `slots` groups of `group_floats` for state streams of at most
// `bytes_per_element[s]` bytes an element each (4 for an fp32 stream; 8-bit AdamW's absmaxes 8 /
// 2048): what the memory count prices. StreamedState allocates what its groups need, which this
// bounds up to a page per stream (a group's blocks cut by tensor ends).
int64_t pool_bytes(int64_t group_floats, std::span<const double> bytes_per_element, int slots = 3);

class StreamedState {
  public:
    // `state[s]` points at the byte of stream s where element a of the slice starts.
    using Work =
        std::function<void(int slice, int64_t a, int64_t b, std::span<std::byte* const> state)>;

    // The files, named weft-offload-rank<rank>-<names[s]>.bin under `dir`, are created here.
    StreamedState(const std::filesystem::path& dir, int rank, std::vector<std::string> names,
                  StateShape shape, int64_t group_floats, int slots = 3);

    // One pass over every group of every slice: read it from the files (when `read`), call
    // `work`, write it back (when `write`). A failed transfer throws naming the file, after
    // every transfer in flight has finished.
    PassStats run(bool read, bool write, const Work& work);

    // The groups (slice, elements [a, b)), in the files' order.
    struct Group {
        int slice;
        int64_t a, b;
    };
    const std::vector<Group>& groups() const { return groups_; }
    // The groups of `slice` overlapping elements [a, b) of it: [first, last).
    std::pair<int, int> groups_in(int slice, int64_t a, int64_t b) const;
    // Reads the streams of group g in the bit mask `streams` into the pool (through the page
    // cache: checkpoints, not the step) and returns each stream's array, as run() hands them
    // (the others' unread); put() writes those streams back. A stream of the group read last
    // is not read again.
    std::vector<std::byte*> get(int g, uint32_t streams = ~0u);
    void put(int g, uint32_t streams = ~0u);

    // Where group g's array of stream s starts in its record (its byte offset in the
    // optimizer's layout, modulo 16).
    int64_t lead(int g, int s) const;

    int64_t group_floats() const { return group_; }
    // Elements of the largest group (group_floats, or a block more where blocks are longer).
    int64_t max_group_floats() const { return max_group_; }
    // Bytes of the buffer pool.
    int64_t pool_bytes() const { return pool_.bytes(); }
    const StateFiles& files() const { return *files_; }

  private:
    int64_t record_bytes(int g, int s) const { return files_->record_bytes(s, g); }
    std::byte* buffer(int slot, int stream);

    StateShape shape_;
    int64_t group_, max_group_ = 0;
    int slots_;
    std::vector<Group> groups_;
    std::vector<int64_t> slot_at_;  // per stream: byte offset in a slot
    int64_t slot_bytes_ = 0;
    std::unique_ptr<StateFiles> files_;
    Buffer pool_;
    IoRing ring_;
    int cached_ = -1;           // the group get() left in slot 0
    uint32_t cached_mask_ = 0;  // and its streams read
};

}  // namespace weft::offload
