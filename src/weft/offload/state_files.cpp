#include "weft/offload/state_files.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "weft/core/error.hpp"

namespace weft::offload {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "weft offload state v1\n";

// Whether an existing file starts with weft's header.
bool is_ours(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) return false;
    char head[kMagic.size()] = {};
    const ssize_t n = ::pread(fd, head, sizeof head, 0);
    ::close(fd);
    return n == ssize_t(sizeof head) && std::string_view(head, sizeof head) == kMagic;
}

void transfer(bool write, int fd, const fs::path& p, char* buf, int64_t bytes, int64_t at) {
    while (bytes > 0) {
        const ssize_t n =
            write ? ::pwrite(fd, buf, size_t(bytes), at) : ::pread(fd, buf, size_t(bytes), at);
        if (n < 0 && errno == EINTR) continue;
        WEFT_CHECK(n > 0, "offload: {} {} at byte {}: {}", write ? "writing" : "reading",
                   p.string(), at, n < 0 ? std::strerror(errno) : "end of file");
        buf += n, bytes -= n, at += n;
    }
}

}  // namespace

void check_offload_dir(const fs::path& dir, const char* flag) {
    std::error_code ec;
    const fs::file_status s = fs::status(dir, ec);
    WEFT_CHECK(fs::exists(s),
               "{} {}: no such directory; expected an existing directory on a "
               "disk with room for the optimizer state (weft does not create it)",
               flag, dir.string());
    WEFT_CHECK(fs::is_directory(s), "{} {}: not a directory; expected a directory", flag,
               dir.string());
    WEFT_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0,
               "{} {}: cannot create files there ({}); expected a writable directory", flag,
               dir.string(), std::strerror(errno));
}

namespace {

std::vector<std::vector<int64_t>> floats_to_bytes(size_t streams, const std::vector<int64_t>& f) {
    std::vector<int64_t> b;
    for (int64_t n : f) b.push_back(n * int64_t(sizeof(float)));
    return std::vector<std::vector<int64_t>>(streams, b);
}

}  // namespace

StateFiles::StateFiles(const fs::path& dir, int rank, std::vector<std::string> streams,
                       const std::vector<int64_t>& record_floats)
    : StateFiles(dir, rank, streams, floats_to_bytes(streams.size(), record_floats)) {}

StateFiles::StateFiles(const fs::path& dir, int rank, std::vector<std::string> streams,
                       std::vector<std::vector<int64_t>> record_bytes)
    : streams_(std::move(streams)), bytes_(std::move(record_bytes)) {
    WEFT_CHECK(!streams_.empty() && bytes_.size() == streams_.size(),
               "internal: {} offload streams with {} record lists", streams_.size(), bytes_.size());
    std::vector<int64_t> file_bytes;
    for (const std::vector<int64_t>& records : bytes_) {
        WEFT_CHECK(records.size() == bytes_[0].size(),
                   "internal: offload streams of {} and {} records", records.size(),
                   bytes_[0].size());
        int64_t at = kHeaderBytes;
        at_.emplace_back();
        for (int64_t n : records) {
            at_.back().push_back(at);
            at += round_up(n, kBlockBytes);
        }
        file_bytes.push_back(at);
    }
    for (const std::string& s : streams_)
        paths_.push_back(dir / ("weft-offload-rank" + std::to_string(rank) + "-" + s + ".bin"));
    // Everything is checked before anything is written: another program's file of our name,
    // then the room for all of them.
    int64_t present = 0;
    for (const fs::path& p : paths_) {
        std::error_code ec;
        if (!fs::exists(p, ec)) continue;
        WEFT_CHECK(fs::is_regular_file(p, ec) && is_ours(p),
                   "--offload-dir: {} exists and is not a weft offload file (it lacks weft's "
                   "header); expected a directory without it (weft does not overwrite files it "
                   "did not write)",
                   p.string());
        present += int64_t(fs::file_size(p, ec));
    }
    struct statvfs v {};
    if (::statvfs(dir.c_str(), &v) == 0) {
        const int64_t free_bytes = int64_t(v.f_bavail) * int64_t(v.f_frsize);
        int64_t need = 0;
        for (int64_t b : file_bytes) need += b;
        WEFT_CHECK(need <= free_bytes + present,
                   "--offload-dir {}: the optimizer state of rank {} needs {:.2f} GiB there, but "
                   "the disk has {:.2f} GiB free; expected a disk with room for it",
                   dir.string(), rank, double(need) / (1 << 30),
                   double(free_bytes + present) / (1 << 30));
    }
    for (size_t i = 0; i < paths_.size(); ++i) {
        const fs::path& p = paths_[i];
        const int b = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        WEFT_CHECK(b >= 0, "--offload-dir: cannot create {}: {}; expected a writable directory",
                   p.string(), std::strerror(errno));
        buffered_.push_back(b);
        const int d = ::open(p.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
        WEFT_CHECK(d >= 0,
                   "--offload-dir: cannot open {} for direct I/O (O_DIRECT): {}; expected a "
                   "directory on a local disk file system (ext4, xfs, tmpfs)",
                   p.string(), std::strerror(errno));
        direct_.push_back(d);
        char header[kHeaderBytes] = {};
        std::memcpy(header, kMagic.data(), kMagic.size());
        transfer(true, b, p, header, kHeaderBytes, 0);
        WEFT_CHECK(::ftruncate(b, file_bytes[i]) == 0, "--offload-dir: cannot size {}: {}",
                   p.string(), std::strerror(errno));
        const int r = ::posix_fallocate(b, 0, file_bytes[i]);
        WEFT_CHECK(r == 0 || r == EOPNOTSUPP,
                   "--offload-dir: cannot allocate {:.2f} GiB for {}: {}; expected a disk with "
                   "room for the optimizer state",
                   double(file_bytes[i]) / (1 << 30), p.string(), std::strerror(r));
    }
}

StateFiles::~StateFiles() {
    for (size_t i = 0; i < paths_.size(); ++i) {
        if (i < direct_.size()) ::close(direct_[i]);
        if (i < buffered_.size()) ::close(buffered_[i]);
        // Scratch: whatever a checkpoint needed was copied into it.
        if (i < buffered_.size()) ::unlink(paths_[i].c_str());
    }
}

int64_t StateFiles::bytes() const {
    int64_t n = 0;
    for (const std::vector<int64_t>& records : bytes_) {
        n += kHeaderBytes;
        for (int64_t b : records) n += round_up(b, kBlockBytes);
    }
    return n;
}

void StateFiles::read(int stream, int record, int64_t at, int64_t n, void* out) const {
    transfer(false, buffered_[size_t(stream)], paths_[size_t(stream)], static_cast<char*>(out), n,
             offset(stream, record) + at);
}

void StateFiles::write(int stream, int record, int64_t at, int64_t n, const void* in) const {
    transfer(true, buffered_[size_t(stream)], paths_[size_t(stream)],
             static_cast<char*>(const_cast<void*>(in)), n, offset(stream, record) + at);
}

}  // namespace weft::offload
