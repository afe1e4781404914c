#pragma once
// One rank's offloaded optimizer state on disk: a file per state stream (AdamW: exp_avg and
// exp_avg_sq; 8-bit AdamW: its codes of m and v and its absmaxes) in the offload directory, named
// weft-offload-rank<R>-<stream>.bin. Each starts with a 4 KiB header that marks it as weft's (a
// file of that name without it is refused, not overwritten), then the stream's records (a group
// of a slice of the rank's shard, or a unit of the working copy), each a number of bytes of its
// own and starting on a 4 KiB boundary so that direct I/O can address it. The files are
// allocated in full when opened (fallocate), so that a disk too small is an error before the
// first step rather than in the middle of one. They are scratch: a checkpoint copies their
// contents in, and they are removed when the run ends.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace weft::offload {

// Floats of one direct-I/O block: records start on multiples of it.
inline constexpr int64_t kBlockFloats = 1024;
inline constexpr int64_t kBlockBytes = kBlockFloats * 4;
inline constexpr int64_t kHeaderBytes = 4096;

// n rounded up to a multiple of m (records and slots to whole direct-I/O blocks).
inline constexpr int64_t round_up(int64_t n, int64_t m) {
    return (n + m - 1) / m * m;
}

// Throws weft::Error unless `dir` is an existing directory this process may create files in;
// `flag` names the option in the message.
void check_offload_dir(const std::filesystem::path& dir, const char* flag);

class StateFiles {
  public:
    // `record_bytes[s][r]`: the bytes of record r of stream s (every stream has as many).
    StateFiles(const std::filesystem::path& dir, int rank, std::vector<std::string> streams,
               std::vector<std::vector<int64_t>> record_bytes);
    // Every stream's records of these many floats.
    StateFiles(const std::filesystem::path& dir, int rank, std::vector<std::string> streams,
               const std::vector<int64_t>& record_floats);
    ~StateFiles();
    StateFiles(const StateFiles&) = delete;
    StateFiles& operator=(const StateFiles&) = delete;

    int streams() const { return int(streams_.size()); }
    int records() const { return int(bytes_[0].size()); }
    int64_t record_bytes(int stream, int record) const {
        return bytes_[size_t(stream)][size_t(record)];
    }
    // The O_DIRECT descriptor of a stream's file, and the byte offset of a record in it.
    int direct_fd(int stream) const { return direct_[size_t(stream)]; }
    int64_t offset(int stream, int record) const { return at_[size_t(stream)][size_t(record)]; }
    const std::filesystem::path& path(int stream) const { return paths_[size_t(stream)]; }
    // Bytes of all the files.
    int64_t bytes() const;

    // Bytes [at, at + n) of a record of a stream, at any alignment (through the page cache:
    // checkpoints, not the step).
    void read(int stream, int record, int64_t at, int64_t n, void* out) const;
    void write(int stream, int record, int64_t at, int64_t n, const void* in) const;

  private:
    std::vector<std::string> streams_;
    std::vector<std::vector<int64_t>> bytes_, at_;  // per stream and record
    std::vector<std::filesystem::path> paths_;
    std::vector<int> direct_, buffered_;
};

}  // namespace weft::offload
