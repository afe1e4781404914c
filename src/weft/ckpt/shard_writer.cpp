#include "weft/ckpt/shard_writer.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/buffer.hpp"

namespace weft::ckpt {

ShardWriter::~ShardWriter() {
    if (thread_.joinable()) thread_.join();
}

void ShardWriter::start(const std::filesystem::path& path, std::span<const float> data,
                        bool async) {
    wait();
    done_.store(false, std::memory_order_release);
    if (async)
        thread_ = std::thread([this, path, data] { run(path, data); });
    else
        run(path, data);
}

void ShardWriter::run(std::filesystem::path path, std::span<const float> data) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
        AtomicFileWriter out(path);
        Digest digest;
        // Pieces of 16 MiB: the digest reads each while it is still in cache, and each is
        // written past the page cache (the staging buffer is page-aligned), which costs the
        // cores a tenth of the kernel time a buffered write does.
        const auto* bytes = reinterpret_cast<const char*>(data.data());
        const size_t total = data.size_bytes(), piece = size_t(1) << 24;
        for (size_t at = 0; at < total; at += piece) {
            const size_t n = std::min(piece, total - at);
            digest.update(bytes + at, n);
            out.write_uncached(bytes + at, n);
        }
        out.commit();
        result_ = {int64_t(total), digest.value(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
    } catch (...) {
        error_ = std::current_exception();
    }
    done_.store(true, std::memory_order_release);
}

void ShardWriter::write_from(const std::filesystem::path& path, int64_t floats,
                             const Source& source) {
    wait();
    const auto t0 = std::chrono::steady_clock::now();
    done_.store(false, std::memory_order_release);
    try {
        AtomicFileWriter out(path);
        Digest digest;
        const int64_t piece = int64_t(1) << 22;  // floats: 16 MiB, as run() writes
        Buffer buf(std::min(piece, std::max<int64_t>(floats, 1)));
        for (int64_t at = 0; at < floats; at += piece) {
            const int64_t n = std::min(piece, floats - at);
            source(at, n, buf.data());
            digest.update(buf.data(), size_t(n) * sizeof(float));
            out.write_uncached(buf.data(), size_t(n) * sizeof(float));
        }
        out.commit();
        result_ = {floats * int64_t(sizeof(float)), digest.value(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
    } catch (...) {
        error_ = std::current_exception();
    }
    done_.store(true, std::memory_order_release);
}

FileDigest ShardWriter::wait() {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return result_;
}

}  // namespace weft::ckpt
