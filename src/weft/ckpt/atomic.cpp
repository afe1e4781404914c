#include "weft/ckpt/atomic.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "weft/core/error.hpp"

namespace weft::ckpt {
namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) {
    return std::error_code(err, std::generic_category()).message();
}

fs::path parent_dir(const fs::path& p) {
    fs::path parent = p.parent_path();
    return parent.empty() ? fs::path(".") : parent;
}

// A trailing slash ("ckpt/") leaves an empty filename; the name is then the last component.
fs::path strip_trailing_slash(const fs::path& p) {
    return p.has_filename() ? p : p.parent_path();
}

// Creates missing directories and fsyncs the parent of each, so that a later rename inside them
// does not outlive the directories themselves after a crash.
void create_dirs_durable(const fs::path& dir) {
    if (fs::is_directory(dir)) return;
    fs::path parent = parent_dir(dir);
    if (parent != dir) create_dirs_durable(parent);
    std::error_code ec;
    fs::create_directory(dir, ec);
    WEFT_CHECK(!ec || fs::is_directory(dir), "cannot create directory {}: {}", dir.string(),
               ec.message());
    fsync_path(parent);
}

// Temporaries of single files also carry a counter, so two threads of one process writing the
// same file do not share one.
fs::path temp_file_name(const fs::path& target) {
    static std::atomic<uint64_t> counter{0};
    return parent_dir(target) / fmt::format("{}{}-{}-{}", kTempPrefix, target.filename().string(),
                                            ::getpid(), counter.fetch_add(1));
}

void sync_tree(const fs::path& dir) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        // Symlinks are not followed: their targets are not part of what this write produced.
        auto status = it->symlink_status();
        if (fs::is_regular_file(status) || fs::is_directory(status)) fsync_path(it->path());
    }
    WEFT_CHECK(!ec, "cannot list directory {} to fsync it: {}", dir.string(), ec.message());
    fsync_path(dir);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const fs::path& target) : target_(strip_trailing_slash(target)) {
    WEFT_CHECK(!target_.filename().empty(), "cannot write a file at {}: expected a file name",
               target.string());
    create_dirs_durable(parent_dir(target_));
    tmp_ = temp_file_name(target_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    WEFT_CHECK(fd_ >= 0, "cannot create temporary file {} for {}: {}", tmp_.string(),
               target_.string(), errno_text(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(tmp_.c_str());
    }
}

void AtomicFileWriter::write(const void* data, size_t size) {
    WEFT_CHECK(fd_ >= 0, "write to {} after commit", target_.string());
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        // Linux writes at most ~2 GiB per call; larger buffers take several.
        ssize_t n = ::write(fd_, p, std::min<size_t>(size, size_t(1) << 30));
        if (n < 0 && errno == EINTR) continue;
        WEFT_CHECK(n > 0, "cannot write {} bytes to {}: {}", size, tmp_.string(),
                   n < 0 ? errno_text(errno) : std::string("no progress"));
        p += n;
        size -= size_t(n);
    }
}

void AtomicFileWriter::write_uncached(const void* data, size_t size) {
    WEFT_CHECK(fd_ >= 0, "write to {} after commit", target_.string());
    constexpr size_t kPage = 4096;
    const off_t at = ::lseek(fd_, 0, SEEK_CUR);
    const size_t bulk = size / kPage * kPage;
    if (bulk == 0 || at < 0 || size_t(at) % kPage != 0 ||
        reinterpret_cast<uintptr_t>(data) % kPage != 0)
        return write(data, size);
    const int direct = ::open(tmp_.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (direct < 0) return write(data, size);
    const char* p = static_cast<const char*>(data);
    size_t done = 0;
    while (done < bulk) {
        ssize_t n = ::pwrite(direct, p + done, std::min<size_t>(bulk - done, size_t(1) << 30),
                             at + off_t(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EINVAL && done == 0) break;  // O_DIRECT refused at the first write
        if (n <= 0) {
            const int err = errno;
            ::close(direct);
            fail("cannot write {} bytes to {}: {}", bulk - done, tmp_.string(),
                 n < 0 ? errno_text(err) : std::string("no progress"));
        }
        done += size_t(n);
    }
    ::close(direct);
    WEFT_CHECK(::lseek(fd_, at + off_t(done), SEEK_SET) >= 0, "cannot seek in {}: {}",
               tmp_.string(), errno_text(errno));
    write(p + done, size - done);
}

void AtomicFileWriter::commit() {
    WEFT_CHECK(fd_ >= 0, "commit of {} called twice", target_.string());
    if (::fsync(fd_) != 0) {
        int err = errno;
        fail("cannot fsync {}: {}", tmp_.string(), errno_text(err));  // destructor cleans up
    }
    int rc = ::close(fd_);
    int err = errno;
    fd_ = -1;
    if (rc != 0) {  // a deferred write error (NFS) surfaces only here
        ::unlink(tmp_.c_str());
        fail("cannot close {}: {}", tmp_.string(), errno_text(err));
    }
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
        err = errno;
        ::unlink(tmp_.c_str());
        fail("cannot move {} to {}: {}", tmp_.string(), target_.string(), errno_text(err));
    }
    fsync_path(parent_dir(target_));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
    AtomicFileWriter w(path);
    w.write(bytes.data(), bytes.size());
    w.commit();
}

void fsync_path(const fs::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    WEFT_CHECK(fd >= 0, "cannot open {} to fsync it: {}", path.string(), errno_text(errno));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    WEFT_CHECK(rc == 0 || err == EINVAL, "cannot fsync {}: {}", path.string(), errno_text(err));
}

void write_dir_atomic(const fs::path& target_in,
                      const std::function<void(const fs::path& tmp_dir)>& fill) {
    const fs::path target = strip_trailing_slash(target_in);
    const std::string name = target.filename().string();
    WEFT_CHECK(!name.empty() && name != "." && name != "..",
               "cannot write a directory at {}: expected a path ending in a directory name",
               target_in.string());
    const fs::path parent = parent_dir(target);
    create_dirs_durable(parent);

    const fs::path tmp = parent / fmt::format("{}{}-{}", kTempPrefix, name, ::getpid());
    std::error_code ec;
    // In a container every run may be pid 1, so a crashed earlier run can have left this very name.
    fs::remove_all(tmp, ec);
    WEFT_CHECK(!ec, "cannot remove stale temporary {}: {}", tmp.string(), ec.message());
    fs::create_directory(tmp, ec);
    WEFT_CHECK(!ec, "cannot create temporary directory {}: {}", tmp.string(), ec.message());
    try {
        fill(tmp);
        sync_tree(tmp);
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }

    replace_dir(tmp, target);
}

void replace_dir(const fs::path& tmp, const fs::path& target) {
    const fs::path parent = parent_dir(target);
    const std::string name = target.filename().string();
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target))) {
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            int err = errno;
            fs::remove_all(tmp, ec);
            fail("cannot move {} to {}: {}", tmp.string(), target.string(), errno_text(err));
        }
        fsync_path(parent);
        return;
    }

    // rename(2) cannot replace a non-empty directory. Exchanging the two names keeps the target
    // whole at every instant; the old version then sits at the temporary name and is removed.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        fsync_path(parent);
        fs::remove_all(tmp, ec);
        return;
    }
    int err = errno;
    if (err != EINVAL && err != ENOSYS && err != ENOTSUP) {
        fs::remove_all(tmp, ec);
        fail("cannot replace {} with {}: {}", target.string(), tmp.string(), errno_text(err));
    }
    // Filesystems without the exchange (some network filesystems): move the old version aside
    // first. A crash between the two renames leaves no target, but both versions stay on disk.
    const fs::path old = parent / fmt::format("{}old-{}-{}", kTempPrefix, name, ::getpid());
    fs::remove_all(old, ec);
    if (::rename(target.c_str(), old.c_str()) != 0) {
        err = errno;
        fs::remove_all(tmp, ec);
        fail("cannot move {} aside to {}: {}", target.string(), old.string(), errno_text(err));
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        err = errno;
        ::rename(old.c_str(), target.c_str());  // put the old version back
        fs::remove_all(tmp, ec);
        fail("cannot move {} to {}: {}", tmp.string(), target.string(), errno_text(err));
    }
    fsync_path(parent);
    fs::remove_all(old, ec);
}

}  // namespace weft::ckpt
