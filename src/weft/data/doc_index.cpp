#include "weft/data/doc_index.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "weft/ckpt/atomic.hpp"
#include "weft/core/error.hpp"
#include "weft/data/io.hpp"
#include "weft/data/token_file.hpp"

namespace weft::data {

namespace {

constexpr size_t kHeaderBytes = sizeof(kDocIndexMagic) + 3 * sizeof(int64_t);

// Refuses starts that break the rules of doc_index.hpp, naming the first bad one.
void check_starts(const std::filesystem::path& path, std::span<const int64_t> starts,
                  int64_t tokens) {
    for (size_t i = 0; i < starts.size(); ++i) {
        const int64_t s = starts[i];
        WEFT_CHECK(i == 0 ? s == 0 : (s > starts[i - 1] && s < tokens),
                   "document index '{}': start {} of document {} is out of order; expected 0 "
                   "first, then strictly increasing starts below the {} tokens",
                   path.string(), s, i, tokens);
    }
}

}  // namespace

std::filesystem::path doc_index_path(const std::filesystem::path& token_file) {
    std::filesystem::path p = token_file;
    return p.replace_extension(".idx");
}

void write_doc_index(const std::filesystem::path& path, std::span<const int64_t> starts,
                     int64_t tokens) {
    WEFT_CHECK(!starts.empty() && tokens >= 1,
               "document index '{}': {} documents of {} tokens, expected at least one of each",
               path.string(), starts.size(), tokens);
    check_starts(path, starts, tokens);
    std::string bytes(kHeaderBytes + starts.size() * sizeof(int64_t), '\0');
    const int64_t header[3] = {kDocIndexVersion, tokens, int64_t(starts.size())};
    std::memcpy(bytes.data(), kDocIndexMagic, sizeof(kDocIndexMagic));
    std::memcpy(bytes.data() + sizeof(kDocIndexMagic), header, sizeof(header));
    std::memcpy(bytes.data() + kHeaderBytes, starts.data(), starts.size() * sizeof(int64_t));
    ckpt::write_file_atomic(path, bytes);
}

std::vector<int64_t> read_doc_index(const std::filesystem::path& path, const TokenFile& file) {
    WEFT_CHECK(std::filesystem::exists(path),
               "token file '{}' has no document index: expected '{}' (written by `weft prepare`)",
               file.path().string(), path.string());
    const std::string bytes = read_whole_file(path, "document index");
    WEFT_CHECK(bytes.size() >= kHeaderBytes &&
                   std::memcmp(bytes.data(), kDocIndexMagic, sizeof(kDocIndexMagic)) == 0,
               "'{}' is not a document index: expected the magic \"weftdocs\" and a {}-byte header",
               path.string(), kHeaderBytes);
    int64_t header[3];
    std::memcpy(header, bytes.data() + sizeof(kDocIndexMagic), sizeof(header));
    const auto [version, tokens, n] = header;
    WEFT_CHECK(version == kDocIndexVersion, "document index '{}' has version {}, expected {}",
               path.string(), version, kDocIndexVersion);
    WEFT_CHECK(tokens == file.size(),
               "document index '{}' indexes {} tokens but '{}' holds {}; expected the index "
               "written with it (prepare the file again)",
               path.string(), tokens, file.path().string(), file.size());
    WEFT_CHECK(n >= 1 && bytes.size() == kHeaderBytes + size_t(n) * sizeof(int64_t),
               "document index '{}' is {} bytes for {} documents, expected {}", path.string(),
               bytes.size(), n, kHeaderBytes + size_t(std::max<int64_t>(n, 0)) * sizeof(int64_t));
    std::vector<int64_t> starts(static_cast<size_t>(n));
    std::memcpy(starts.data(), bytes.data() + kHeaderBytes, size_t(n) * sizeof(int64_t));
    check_starts(path, starts, tokens);
    return starts;
}

std::vector<int64_t> starts_at_token(const TokenFile& file, int64_t eot) {
    WEFT_CHECK(eot >= 0, "--eot must be a token id (0 or more), got {}", eot);
    std::vector<int64_t> starts{0};
    auto scan = [&](const auto* tokens) {
        for (int64_t i = 1; i < file.size(); ++i)
            if (int64_t(tokens[i]) == eot) starts.push_back(i);
    };
    if (file.data16()) {
        scan(file.data16());
    } else {
        scan(file.data32());
    }
    return starts;
}

}  // namespace weft::data
