#pragma once
// Writes one rank's checkpoint shard (a staged copy of its state) to disk, computing its digest
// as it goes, either at once or on a thread of its own while training continues. At most one
// write is in flight: start() waits for the previous one. It does no communication, so it needs
// no MPI thread support; committing the checkpoint (the manifest) is the caller's collective.
#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <span>
#include <thread>

#include "weft/ckpt/digest.hpp"

namespace weft::ckpt {

class ShardWriter {
  public:
    ShardWriter() = default;
    ~ShardWriter();
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;

    // Writes `data` to `path` atomically (temporary, fsync, rename). `data` must stay untouched
    // until wait() returns. With `async` the write runs on a thread and start returns at once.
    void start(const std::filesystem::path& path, std::span<const float> data, bool async);
    // Fills floats [at, at + n) of the shard into `out`; called for consecutive pieces.
    using Source = std::function<void(int64_t at, int64_t n, float* out)>;
    // Writes the `floats` floats `source` produces, piece by piece, at once: no copy of the
    // whole is held (a state that is partly on disk, --offload). The same file as start()'s.
    void write_from(const std::filesystem::path& path, int64_t floats, const Source& source);
    // Whether the write started last has finished (successfully or not); true when idle.
    bool done() const { return done_.load(std::memory_order_acquire); }
    // Waits for the write; rethrows its error. Its size and digest.
    FileDigest wait();

  private:
    void run(std::filesystem::path path, std::span<const float> data);

    std::thread thread_;
    std::atomic<bool> done_{true};
    FileDigest result_;
    std::exception_ptr error_;
};

}  // namespace weft::ckpt
