#pragma once
// Token files: token ids on disk, read through mmap so that every rank shares the page cache
// instead of holding a copy.
//
// Three layouts are read, all little-endian:
//   - llm.c's GPT-2 layout: a header of 256 int32 (magic 20240520, version 1, token count), then
//     uint16 tokens.
//   - llm.c's Llama 3 layout (dev/data/data_common.py): the same header with magic 20240801 and
//     version 7, then uint32 tokens, for vocabularies past 65536 ids (Llama 3 has 128256).
//   - nanoGPT's: bare uint16 tokens, no header.
// Headerless files are read only when asked for (TokenFormat::raw, `--data-format raw`): guessing
// from the first int32 would read an llm.c file whose magic is damaged as tokens, its header
// trained on and its odd count blamed on the vocabulary. So an llm.c file must carry one of the
// two magics, and a raw file must not start with one.
//
// Readers go through TokenFile::read(), which converts either width to the int32 the model takes
// and checks the range, so nothing outside the loader's hot loop has to know the width.
#include <bit>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

namespace weft::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

constexpr int64_t kTokenFileHeaderInts = 256;
// llm.c's GPT-2 layout: uint16 tokens.
constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
// llm.c's Llama 3 layout: uint32 tokens.
constexpr int32_t kTokenFileMagic32 = 20240801;
constexpr int32_t kTokenFileVersion32 = 7;

// Writes llm.c's uint16 layout to `path.tmp`, fsyncs it and renames it over `path`, so that a
// reader never sees a half-written file under the final name.
void write_token_file(const std::filesystem::path& path, std::span<const uint16_t> tokens);
// The same, choosing the narrowest layout: uint16 when every id is below 65536 (so GPT-2 data
// stays readable by llm.c's train_gpt2 and half the size), uint32 otherwise.
void write_token_file(const std::filesystem::path& path, std::span<const uint32_t> tokens);

enum class TokenFormat {
    llmc,  // llm.c's header, uint16 or uint32 tokens
    raw,   // nanoGPT's headerless uint16 tokens
};
// The value of --data-format: "llmc" or "raw"; anything else is a weft::Error naming it.
TokenFormat parse_token_format(std::string_view value);

class TokenFile {
  public:
    // Checks the layout completely (magic, version, count against file size, whole tokens, at
    // least one token); every failure is a weft::Error naming the file and the numbers.
    static TokenFile open(const std::filesystem::path& path,
                          TokenFormat format = TokenFormat::llmc);

    int64_t size() const { return size_; }            // tokens
    int token_bytes() const { return token_bytes_; }  // 2 or 4
    bool has_header() const { return has_header_; }
    const std::filesystem::path& path() const { return path_; }

    // Tokens [first, first + count) as int32, into out[count]; a range outside the file is a
    // weft::Error. Ids of a uint32 file above INT32_MAX wrap: check_token_ids() refuses them.
    void read(int64_t first, int64_t count, int32_t* out) const;
    // Token i; a position outside the file is a weft::Error.
    int64_t token(int64_t i) const;

    // The tokens in place, for scans that want the width: exactly one is non-null (both are null
    // for a moved-from file).
    const uint16_t* data16() const { return token_bytes_ == 2 ? tokens16() : nullptr; }
    const uint32_t* data32() const { return token_bytes_ == 4 ? tokens32() : nullptr; }
    // The uint16 tokens, for callers written before uint32 files; a uint32 file is a weft::Error.
    // Prefer read().
    const uint16_t* data() const;

    TokenFile(TokenFile&& other) noexcept;
    TokenFile& operator=(TokenFile&& other) noexcept;
    TokenFile(const TokenFile&) = delete;
    TokenFile& operator=(const TokenFile&) = delete;
    ~TokenFile();

  private:
    TokenFile() = default;
    void unmap();
    const uint16_t* tokens16() const { return static_cast<const uint16_t*>(tokens_); }
    const uint32_t* tokens32() const { return static_cast<const uint32_t*>(tokens_); }

    std::filesystem::path path_;
    void* map_ = nullptr;  // the whole file, or null
    size_t map_bytes_ = 0;
    const void* tokens_ = nullptr;
    int64_t size_ = 0;
    int token_bytes_ = 0;
    bool has_header_ = false;
};

// Refuses a file holding an id outside [0, vocab_size): the embedding lookup would read past its
// table. Names the file, the first bad position, the id and the vocabulary size. A parallel scan
// at memory speed; call it once per file, before training or evaluating on it.
void check_token_ids(const TokenFile& file, int64_t vocab_size);

}  // namespace weft::data
