#pragma once
// Token files: uint16 GPT-2 token ids on disk, read through mmap so that every rank shares the
// page cache instead of holding a copy.
//
// Two layouts are read. llm.c's: a header of 256 int32 (magic 20240520, version 1, token count)
// and then the tokens. nanoGPT's: the bare tokens, no header. A file is llm.c's when its first
// int32 is the magic; as bare tokens those bytes would be ids 54856 and 308, and 54856 is past
// GPT-2's vocabulary, so a nanoGPT file of GPT-2 tokens is never mistaken for one. Little-endian
// only, as both formats are.
#include <bit>
#include <cstdint>
#include <filesystem>
#include <span>

namespace weft::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
constexpr int64_t kTokenFileHeaderInts = 256;

// Writes llm.c's layout to `path.tmp`, fsyncs it and renames it over `path`, so that a reader
// never sees a half-written file under the final name.
void write_token_file(const std::filesystem::path& path, std::span<const uint16_t> tokens);

class TokenFile {
  public:
    static TokenFile open(const std::filesystem::path& path);

    int64_t size() const { return size_; }  // tokens
    const uint16_t* data() const { return tokens_; }
    bool has_header() const { return has_header_; }
    const std::filesystem::path& path() const { return path_; }

    TokenFile(TokenFile&& other) noexcept;
    TokenFile& operator=(TokenFile&& other) noexcept;
    TokenFile(const TokenFile&) = delete;
    TokenFile& operator=(const TokenFile&) = delete;
    ~TokenFile();

  private:
    TokenFile() = default;
    void unmap();

    std::filesystem::path path_;
    void* map_ = nullptr;  // the whole file, or null
    size_t map_bytes_ = 0;
    const uint16_t* tokens_ = nullptr;
    int64_t size_ = 0;
    bool has_header_ = false;
};

}  // namespace weft::data
