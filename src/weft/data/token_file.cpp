#include "weft/data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::data {

namespace {

constexpr size_t kHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

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

// Writes llm.c's header and then whatever `body` writes to `path.tmp`, fsyncs it and renames it
// over `path`.
void write_atomically(const std::filesystem::path& path, int32_t magic, int32_t version,
                      size_t count,
                      const std::function<void(int fd, const std::filesystem::path&)>& body) {
    WEFT_CHECK(count <= size_t(std::numeric_limits<int32_t>::max()),
               "token file '{}': {} tokens do not fit llm.c's int32 count (at most {})",
               path.string(), count, std::numeric_limits<int32_t>::max());
    std::vector<int32_t> header(kTokenFileHeaderInts, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = static_cast<int32_t>(count);

    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
        Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
        WEFT_CHECK(f.fd >= 0, "cannot create token file '{}': {}", tmp.string(),
                   std::strerror(errno));
        write_all(f.fd, header.data(), kHeaderBytes, tmp);
        body(f.fd, tmp);
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

// The first position in [0, n) whose id is >= limit, or n. Blocks are scanned for their maximum
// first (a loop the compiler vectorises) and searched only when that maximum is bad, so a clean
// file costs one pass at memory speed.
template <typename Tok>
int64_t first_id_at_or_above(const Tok* tokens, int64_t n, int64_t limit) {
    if (limit > int64_t(std::numeric_limits<Tok>::max())) return n;
    const Tok lim = static_cast<Tok>(limit);
    constexpr int64_t kBlock = int64_t(1) << 16;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    int64_t first = n;
#pragma omp parallel for schedule(dynamic, 16) reduction(min : first) if (blocks > 16)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
        Tok worst = 0;
        for (int64_t i = lo; i < hi; ++i) worst = std::max(worst, tokens[i]);
        if (worst < lim) continue;
        for (int64_t i = lo; i < hi; ++i) {
            if (tokens[i] >= lim) {
                first = std::min(first, i);
                break;
            }
        }
    }
    return first;
}

}  // namespace

void write_token_file(const std::filesystem::path& path, std::span<const uint16_t> tokens) {
    write_atomically(path, kTokenFileMagic, kTokenFileVersion, tokens.size(),
                     [&](int fd, const std::filesystem::path& tmp) {
                         write_all(fd, tokens.data(), tokens.size_bytes(), tmp);
                     });
}

void write_token_file(const std::filesystem::path& path, std::span<const uint32_t> tokens) {
    const bool wide =
        std::any_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t > 0xFFFF; });
    if (wide) {
        write_atomically(path, kTokenFileMagic32, kTokenFileVersion32, tokens.size(),
                         [&](int fd, const std::filesystem::path& tmp) {
                             write_all(fd, tokens.data(), tokens.size_bytes(), tmp);
                         });
        return;
    }
    // Narrowed a chunk at a time: a corpus of billions of tokens is not copied whole.
    write_atomically(path, kTokenFileMagic, kTokenFileVersion, tokens.size(),
                     [&](int fd, const std::filesystem::path& tmp) {
                         constexpr size_t kChunk = size_t(1) << 20;
                         std::vector<uint16_t> narrow(std::min(kChunk, tokens.size()));
                         for (size_t lo = 0; lo < tokens.size(); lo += kChunk) {
                             const size_t n = std::min(kChunk, tokens.size() - lo);
                             for (size_t i = 0; i < n; ++i)
                                 narrow[i] = static_cast<uint16_t>(tokens[lo + i]);
                             write_all(fd, narrow.data(), n * sizeof(uint16_t), tmp);
                         }
                     });
}

TokenFormat parse_token_format(std::string_view value) {
    if (value == "llmc") return TokenFormat::llmc;
    if (value == "raw") return TokenFormat::raw;
    fail(
        "--data-format must be llmc (llm.c's header, as `weft prepare` writes) or raw (nanoGPT's "
        "headerless uint16 tokens), got '{}'",
        value);
}

TokenFile TokenFile::open(const std::filesystem::path& path, TokenFormat format) {
    TokenFile tf;
    tf.path_ = path;
    const std::string name = path.string();
    Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    WEFT_CHECK(f.fd >= 0, "cannot open token file '{}': {}", name, std::strerror(errno));
    struct stat st {};
    WEFT_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode),
               "token file '{}' is not a regular file", name);
    const auto bytes = static_cast<size_t>(st.st_size);
    WEFT_CHECK(bytes > 0, "token file '{}' is empty, expected tokens", name);

    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, f.fd, 0);
    WEFT_CHECK(map != MAP_FAILED, "cannot mmap token file '{}' ({} bytes): {}", name, bytes,
               std::strerror(errno));
    tf.map_ = map;  // from here on the destructor unmaps, also when a check below throws
    tf.map_bytes_ = bytes;
    const auto* base = static_cast<const unsigned char*>(map);

    int32_t first = 0;
    if (bytes >= sizeof(int32_t)) std::memcpy(&first, base, sizeof first);
    const bool magic = first == kTokenFileMagic || first == kTokenFileMagic32;
    if (format == TokenFormat::llmc) {
        WEFT_CHECK(bytes >= sizeof(int32_t),
                   "token file '{}' is {} bytes, too short for llm.c's header; a headerless "
                   "nanoGPT file of uint16 tokens needs --data-format raw",
                   name, bytes);
        WEFT_CHECK(magic,
                   "token file '{}' has a bad header magic {}, expected {} (llm.c, uint16 tokens) "
                   "or {} (uint32 tokens); a headerless nanoGPT file of uint16 tokens needs "
                   "--data-format raw",
                   name, first, kTokenFileMagic, kTokenFileMagic32);
    } else {
        WEFT_CHECK(!magic,
                   "token file '{}' starts with llm.c's header magic {}, but --data-format raw "
                   "reads it as headerless uint16 tokens; leave out --data-format raw",
                   name, first);
    }
    if (magic) {
        const bool wide = first == kTokenFileMagic32;
        const int32_t want_version = wide ? kTokenFileVersion32 : kTokenFileVersion;
        WEFT_CHECK(bytes >= kHeaderBytes,
                   "token file '{}' is truncated: {} bytes, expected at least the {}-byte header",
                   name, bytes, kHeaderBytes);
        int32_t header[3];
        std::memcpy(header, base, sizeof header);
        WEFT_CHECK(header[1] == want_version,
                   "token file '{}' has magic {} and version {}, expected version {} ({}); llm.c "
                   "writes uint16 tokens as magic {} version {} and uint32 tokens as magic {} "
                   "version {}",
                   name, first, header[1], want_version, wide ? "uint32 tokens" : "uint16 tokens",
                   kTokenFileMagic, kTokenFileVersion, kTokenFileMagic32, kTokenFileVersion32);
        const size_t width = wide ? 4 : 2;
        WEFT_CHECK(header[2] >= 0, "token file '{}' has a negative token count {}", name,
                   header[2]);
        const size_t data_bytes = bytes - kHeaderBytes;
        WEFT_CHECK(data_bytes % width == 0,
                   "token file '{}' has {} bytes after its header, not a whole number of {}-byte "
                   "tokens (the header says {} tokens)",
                   name, data_bytes, width, header[2]);
        // An int32 count times 4 cannot overflow size_t, so this comparison is exact.
        const size_t expected = kHeaderBytes + size_t(header[2]) * width;
        WEFT_CHECK(bytes == expected,
                   "token file '{}' is {} bytes, expected {} (header + {} tokens of {} bytes as "
                   "its header says): {}",
                   name, bytes, expected, header[2], width,
                   bytes < expected ? "truncated" : "trailing bytes");
        tf.tokens_ = base + kHeaderBytes;
        tf.size_ = header[2];
        tf.token_bytes_ = static_cast<int>(width);
        tf.has_header_ = true;
    } else {
        WEFT_CHECK(bytes % 2 == 0,
                   "token file '{}' has no llm.c header and an odd size of {} bytes, expected "
                   "whole uint16 tokens",
                   name, bytes);
        tf.tokens_ = base;
        tf.size_ = static_cast<int64_t>(bytes / 2);
        tf.token_bytes_ = 2;
    }
    WEFT_CHECK(tf.size_ >= 1, "token file '{}' holds no tokens, expected at least one", name);
    return tf;
}

void TokenFile::read(int64_t first, int64_t count, int32_t* out) const {
    // Written so that no sum can overflow, whatever the caller passes.
    WEFT_CHECK(first >= 0 && count >= 0 && first <= size_ && count <= size_ - first,
               "reading tokens [{}, {} + {}) of token file '{}', which holds {} tokens", first,
               first, count, path_.string(), size_);
    if (token_bytes_ == 2) {
        const uint16_t* p = tokens16() + first;
        for (int64_t i = 0; i < count; ++i) out[i] = p[i];
    } else {
        const uint32_t* p = tokens32() + first;
        for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(p[i]);
    }
}

int64_t TokenFile::token(int64_t i) const {
    WEFT_CHECK(i >= 0 && i < size_, "token {} is outside token file '{}', which holds {} tokens", i,
               path_.string(), size_);
    return token_bytes_ == 2 ? int64_t(tokens16()[i]) : int64_t(tokens32()[i]);
}

const uint16_t* TokenFile::data() const {
    WEFT_CHECK(token_bytes_ != 4,
               "token file '{}' holds uint32 tokens; this reader takes uint16 tokens only",
               path_.string());
    return data16();
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
        token_bytes_ = std::exchange(other.token_bytes_, 0);
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

void check_token_ids(const TokenFile& file, int64_t vocab_size) {
    WEFT_CHECK(vocab_size >= 1 && vocab_size <= std::numeric_limits<int32_t>::max(),
               "vocabulary size {} for token file '{}' is outside [1, {}]", vocab_size,
               file.path().string(), std::numeric_limits<int32_t>::max());
    const int64_t n = file.size();
    const int64_t bad = file.data16() ? first_id_at_or_above(file.data16(), n, vocab_size)
                                      : first_id_at_or_above(file.data32(), n, vocab_size);
    if (bad == n) return;
    fail(
        "token file '{}' holds token id {} at position {}, outside the model's vocabulary of {} "
        "ids (expected ids in [0, {})); was it tokenized for another model?",
        file.path().string(), file.token(bad), bad, vocab_size, vocab_size);
}

}  // namespace weft::data
