#pragma once
// One rank's offloaded optimizer state on disk: a file per state stream (AdamW: exp_avg and
// exp_avg_sq) in the offload directory, named weft-offload-rank<R>-<stream>.bin. Each starts
// with a 4 KiB header that marks it as weft's (a file of that name without it is refused, not
// overwritten), then the stream's floats for every slice of the rank's shard, each slice
// starting on a 4 KiB boundary so that direct I/O can address any group of it. The files are
// allocated in full when opened (fallocate), so that a disk too small is an error before the
// first step rather than in the middle of one. They are scratch: a checkpoint copies their
// contents in, and they are removed when the run ends.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace weft::offload {

// Floats of one direct-I/O block: slices and groups start on multiples of it.
inline constexpr int64_t kBlockFloats = 1024;
inline constexpr int64_t kHeaderBytes = 4096;

// Throws weft::Error unless `dir` is an existing directory this process may create files in;
// `flag` names the option in the message.
void check_offload_dir(const std::filesystem::path& dir, const char* flag);

class StateFiles {
  public:
    // `slice_floats`: the size of each slice of the shard, in the order the optimizer keeps them.
    StateFiles(const std::filesystem::path& dir, int rank, std::vector<std::string> streams,
               std::vector<int64_t> slice_floats);
    ~StateFiles();
    StateFiles(const StateFiles&) = delete;
    StateFiles& operator=(const StateFiles&) = delete;

    int streams() const { return int(streams_.size()); }
    int slices() const { return int(slice_floats_.size()); }
    int64_t slice_floats(int slice) const { return slice_floats_[size_t(slice)]; }
    // The O_DIRECT descriptor of a stream's file, and the byte offset of float `at` of a slice.
    int direct_fd(int stream) const { return direct_[size_t(stream)]; }
    int64_t offset(int slice, int64_t at) const;
    const std::filesystem::path& path(int stream) const { return paths_[size_t(stream)]; }
    // Bytes of all the files.
    int64_t bytes() const;

    // Floats [at, at + n) of a slice of a stream, at any alignment (through the page cache:
    // checkpoints, not the step).
    void read(int stream, int slice, int64_t at, int64_t n, float* out) const;
    void write(int stream, int slice, int64_t at, int64_t n, const float* in) const;

  private:
    std::vector<std::string> streams_;
    std::vector<int64_t> slice_floats_, slice_at_;  // slice_at_: floats before each slice
    std::vector<std::filesystem::path> paths_;
    std::vector<int> direct_, buffered_;
};

}  // namespace weft::offload
