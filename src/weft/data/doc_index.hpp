#pragma once
// The document index beside a token file: where each document of the file starts, so that
// training can pack whole documents into its sequences and keep attention inside each one
// (--pack documents, docs/long_context.md).
//
// `<stem>.bin` has its index in `<stem>.idx` (doc_index_path), little-endian:
//   bytes 0..7   the ASCII magic "weftdocs"
//   int64        version, 1
//   int64        tokens of the token file it indexes (a stale index of another file is refused)
//   int64        n, the documents
//   int64 x n    their start offsets in tokens: strictly increasing, the first 0, all < tokens
// Document i is tokens [start_i, start_{i+1}), the last one ending at the file's end.
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace weft::data {

class TokenFile;

constexpr char kDocIndexMagic[8] = {'w', 'e', 'f', 't', 'd', 'o', 'c', 's'};
constexpr int64_t kDocIndexVersion = 1;

// `<stem>.idx` for the token file `<stem>.bin` (any extension is replaced).
std::filesystem::path doc_index_path(const std::filesystem::path& token_file);

// Writes the index of a token file of `tokens` tokens atomically (temporary, fsync, rename);
// starts that break the rules above are a weft::Error naming the first bad one.
void write_doc_index(const std::filesystem::path& path, std::span<const int64_t> starts,
                     int64_t tokens);

// The starts of a file's documents, read from its index and checked against the file; a missing,
// damaged or stale index is a weft::Error naming it and what was expected.
std::vector<int64_t> read_doc_index(const std::filesystem::path& path, const TokenFile& file);

// The index of a token file whose documents each begin with the end-of-text token `eot` (llm.c's
// and nanoGPT's files, prepared before indexes existed): 0, then every position holding `eot`.
std::vector<int64_t> starts_at_token(const TokenFile& file, int64_t eot);

}  // namespace weft::data
