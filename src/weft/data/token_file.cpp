#include "weft/data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::data {

namespace {

// Closes a descriptor on every path out, errors included.
struct Fd {
    int fd;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

void write_all(int fd, const void* data, size_t bytes, const std::filesystem::path& path) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        ssize_t n = ::write(fd, p, bytes);
        if (n < 0 && errno == EINTR) continue;
        WEFT_CHECK(n > 0, "writing token file '{}' failed: {}", path.string(),
                   std::strerror(errno));
        p += n;
        bytes -= static_cast<size_t>(n);
    }
}

}  // namespace

void write_token_file(const std::filesystem::path& path, std::span<const uint16_t> tokens) {
    WEFT_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()),
               "token file '{}': {} tokens do not fit llm.c's int32 count (at most {})",
               path.string(), tokens.size(), std::numeric_limits<int32_t>::max());
    std::vector<int32_t> header(kTokenFileHeaderInts, 0);
    header[0] = kTokenFileMagic;
    header[1] = kTokenFileVersion;
    header[2] = static_cast<int32_t>(tokens.size());

    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
        Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
        WEFT_CHECK(f.fd >= 0, "cannot create token file '{}': {}", tmp.string(),
                   std::strerror(errno));
        write_all(f.fd, header.data(), header.size() * sizeof(int32_t), tmp);
        write_all(f.fd, tokens.data(), tokens.size_bytes(), tmp);
        WEFT_CHECK(::fsync(f.fd) == 0, "fsync of token file '{}' failed: {}", tmp.string(),
                   std::strerror(errno));
    }
    WEFT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '{}' to '{}': {}",
               tmp.string(), path.string(), std::strerror(errno));
    // The rename itself is durable only once the directory is synced; failing to is not fatal.
    std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (d.fd >= 0) ::fsync(d.fd);
}

TokenFile TokenFile::open(const std::filesystem::path& path) {
    TokenFile tf;
    tf.path_ = path;
    Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    WEFT_CHECK(f.fd >= 0, "cannot open token file '{}': {}", path.string(), std::strerror(errno));
    struct stat st {};
    WEFT_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode),
               "token file '{}' is not a regular file", path.string());
    const auto bytes = static_cast<size_t>(st.st_size);
    WEFT_CHECK(bytes > 0, "token file '{}' is empty, expected uint16 tokens", path.string());

    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, f.fd, 0);
    WEFT_CHECK(map != MAP_FAILED, "cannot mmap token file '{}' ({} bytes): {}", path.string(),
               bytes, std::strerror(errno));
    tf.map_ = map;  // from here on the destructor unmaps, also when a check below throws
    tf.map_bytes_ = bytes;
    const auto* base = static_cast<const unsigned char*>(map);

    int32_t first = 0;
    if (bytes >= sizeof(int32_t)) std::memcpy(&first, base, sizeof first);
    if (first == kTokenFileMagic) {
        constexpr size_t header_bytes = kTokenFileHeaderInts * sizeof(int32_t);
        WEFT_CHECK(bytes >= header_bytes,
                   "token file '{}' is truncated: {} bytes, expected at least the {}-byte header",
                   path.string(), bytes, header_bytes);
        int32_t header[3];
        std::memcpy(header, base, sizeof header);
        WEFT_CHECK(header[1] == kTokenFileVersion,
                   "token file '{}' has version {}, expected {} (llm.c's uint16 tokens)",
                   path.string(), header[1], kTokenFileVersion);
        WEFT_CHECK(header[2] >= 0, "token file '{}' has a negative token count {}", path.string(),
                   header[2]);
        const size_t expected = header_bytes + size_t(header[2]) * sizeof(uint16_t);
        WEFT_CHECK(bytes == expected,
                   "token file '{}' is {} bytes, expected {} (header + {} tokens as its header "
                   "says): {}",
                   path.string(), bytes, expected, header[2],
                   bytes < expected ? "truncated" : "trailing bytes");
        tf.tokens_ = reinterpret_cast<const uint16_t*>(base + header_bytes);
        tf.size_ = header[2];
        tf.has_header_ = true;
    } else {
        WEFT_CHECK(bytes % 2 == 0,
                   "token file '{}' has no llm.c header and an odd size of {} bytes, expected "
                   "whole uint16 tokens",
                   path.string(), bytes);
        tf.tokens_ = reinterpret_cast<const uint16_t*>(base);
        tf.size_ = static_cast<int64_t>(bytes / 2);
    }
    return tf;
}

TokenFile::TokenFile(TokenFile&& other) noexcept {
    *this = std::move(other);
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
    if (this != &other) {
        unmap();
        path_ = std::move(other.path_);
        map_ = std::exchange(other.map_, nullptr);
        map_bytes_ = std::exchange(other.map_bytes_, 0);
        tokens_ = std::exchange(other.tokens_, nullptr);
        size_ = std::exchange(other.size_, 0);
        has_header_ = std::exchange(other.has_header_, false);
    }
    return *this;
}

TokenFile::~TokenFile() {
    unmap();
}

void TokenFile::unmap() {
    if (map_) ::munmap(map_, map_bytes_);
    map_ = nullptr;
}

}  // namespace weft::data
