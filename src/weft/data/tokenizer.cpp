#include "weft/data/tokenizer.hpp"

#include <limits>
#include <mutex>

#include "weft/core/error.hpp"
#include "weft/data/encoder_json.hpp"
#include "weft/data/io.hpp"
#include "weft/data/pretokenize.hpp"

namespace weft::data {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

// encoder.py's bytes_to_unicode, inverted: code point -> byte, or -1 if no byte maps to it.
// Printable Latin-1 bytes stand for themselves; the other 68 bytes take 256, 257, ... in order.
std::vector<int> unicode_to_byte_table() {
    std::vector<int> table(256 + 68, -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        table[printable ? b : next++] = b;
    }
    return table;
}

// A vocabulary entry spelled in encoder.py's byte alphabet (UTF-8 text) -> its raw bytes.
std::string unmap_bytes(std::string_view spelled, const std::vector<int>& table,
                        const std::filesystem::path& path) {
    std::string bytes;
    for (size_t i = 0; i < spelled.size();) {
        auto b0 = static_cast<unsigned char>(spelled[i]);
        uint32_t cp = b0;
        size_t len = 1;
        // The alphabet ends below U+0800, so one- and two-byte UTF-8 is all there is to read.
        if (b0 >= 0xC0 && b0 < 0xE0 && i + 1 < spelled.size() &&
            (static_cast<unsigned char>(spelled[i + 1]) & 0xC0) == 0x80) {
            cp = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(spelled[i + 1]) & 0x3F);
            len = 2;
        }
        WEFT_CHECK(cp < table.size() && table[cp] >= 0 && (b0 < 0x80 || len == 2),
                   "{}: token '{}' has a character (U+{:04X}) outside GPT-2's byte alphabet",
                   path.string(), spelled, cp);
        bytes += static_cast<char>(table[cp]);
        i += len;
    }
    return bytes;
}

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

// encode() is const and may be called from several threads, so the memo has its own lock.
struct Gpt2Tokenizer::Cache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

Gpt2Tokenizer::Gpt2Tokenizer() : cache_(std::make_unique<Cache>()) {}
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Gpt2Tokenizer Gpt2Tokenizer::load(const std::filesystem::path& encoder_json,
                                  const std::filesystem::path& vocab_bpe) {
    Gpt2Tokenizer tok;
    const std::vector<int> table = unicode_to_byte_table();

    auto entries =
        parse_string_int_object(read_whole_file(encoder_json, "GPT-2 encoder.json"), encoder_json);
    WEFT_CHECK(!entries.empty(), "{}: the vocabulary is empty", encoder_json.string());
    const auto n = static_cast<int64_t>(entries.size());
    tok.tokens_.resize(entries.size());
    std::vector<bool> seen(entries.size());
    std::unordered_map<std::string, int32_t> ids;
    for (auto& [spelled, id] : entries) {
        WEFT_CHECK(id >= 0 && id < n && !seen[id],
                   "{}: token '{}' has id {}, expected ids 0..{} each used once",
                   encoder_json.string(), spelled, id, n - 1);
        seen[id] = true;
        std::string bytes = unmap_bytes(spelled, table, encoder_json);
        if (bytes == kEndOfText) tok.eot_ = static_cast<int32_t>(id);
        tok.tokens_[id] = bytes;
        ids.emplace(std::move(bytes), static_cast<int32_t>(id));
    }
    WEFT_CHECK(tok.eot_ >= 0, "{}: no '{}' token", encoder_json.string(), kEndOfText);
    for (int b = 0; b < 256; ++b) {
        auto it = ids.find(std::string(1, static_cast<char>(b)));
        WEFT_CHECK(it != ids.end(), "{}: no token for byte 0x{:02X}; byte-level BPE needs all 256",
                   encoder_json.string(), b);
        tok.byte_token_[b] = it->second;
    }

    // vocab.bpe: a "#version" line, then one merge "left right" a line, best (rank 0) first.
    const std::string text = read_whole_file(vocab_bpe, "GPT-2 vocab.bpe");
    auto id_of = [&](const std::string& bytes, std::string_view line, size_t line_no) {
        auto it = ids.find(bytes);
        WEFT_CHECK(it != ids.end(), "{}:{}: merge '{}' uses or makes a token missing from {}",
                   vocab_bpe.string(), line_no, line, encoder_json.string());
        return it->second;
    };
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty() || (line_no == 1 && line.starts_with("#"))) continue;
        size_t space = line.find(' ');
        WEFT_CHECK(space != 0 && space != std::string_view::npos && space + 1 < line.size() &&
                       line.find(' ', space + 1) == std::string_view::npos,
                   "{}:{}: expected a merge 'left right', found '{}'", vocab_bpe.string(), line_no,
                   line);
        std::string left = unmap_bytes(line.substr(0, space), table, vocab_bpe);
        std::string right = unmap_bytes(line.substr(space + 1), table, vocab_bpe);
        int32_t a = id_of(left, line, line_no), b = id_of(right, line, line_no);
        int32_t result = id_of(left + right, line, line_no);
        auto rank = static_cast<int32_t>(tok.merges_.size());
        bool fresh =
            tok.merges_.emplace(uint64_t(a) << 32 | uint32_t(b), Merge{rank, result}).second;
        WEFT_CHECK(fresh, "{}:{}: merge '{}' appears twice", vocab_bpe.string(), line_no, line);
    }
    WEFT_CHECK(!tok.merges_.empty(), "{}: no merges", vocab_bpe.string());
    return tok;
}

// encoder.py's bpe(): while any adjacent pair has a merge, take the pair of lowest rank and merge
// its every occurrence, left to right.
void Gpt2Tokenizer::merge(std::vector<int32_t>& word) const {
    while (word.size() > 1) {
        Merge best{std::numeric_limits<int32_t>::max(), -1};
        int32_t left = 0, right = 0;
        for (size_t i = 0; i + 1 < word.size(); ++i) {
            auto it = merges_.find(uint64_t(word[i]) << 32 | uint32_t(word[i + 1]));
            if (it != merges_.end() && it->second.rank < best.rank)
                best = it->second, left = word[i], right = word[i + 1];
        }
        if (best.result < 0) return;
        size_t out = 0;
        for (size_t i = 0; i < word.size(); ++out) {
            if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
                word[out] = best.result;
                i += 2;
            } else {
                word[out] = word[i++];
            }
        }
        word.resize(out);
    }
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() == 1) {
        out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
        return;
    }
    {
        std::lock_guard lock(cache_->mutex);
        if (auto it = cache_->map.find(piece); it != cache_->map.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> word(piece.size());
    for (size_t i = 0; i < piece.size(); ++i)
        word[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    merge(word);
    out.insert(out.end(), word.begin(), word.end());
    std::lock_guard lock(cache_->mutex);
    // Bounded, so that encoding an endless stream of novel words cannot eat all memory.
    if (cache_->map.size() >= (size_t(1) << 20)) cache_->map.clear();
    cache_->map.emplace(std::string(piece), std::move(word));
}

std::vector<int32_t> Gpt2Tokenizer::encode_ordinary(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3);
    for (size_t pos = 0; pos < text.size();) {
        size_t end = pretoken_end(text, pos);
        encode_piece(text.substr(pos, end - pos), out);
        pos = end;
    }
    return out;
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> out;
    for (;;) {
        size_t at = text.find(kEndOfText);
        std::vector<int32_t> part = encode_ordinary(text.substr(0, at));
        out.insert(out.end(), part.begin(), part.end());
        if (at == std::string_view::npos) return out;
        out.push_back(eot_);
        text.remove_prefix(at + kEndOfText.size());
    }
}

const std::string& Gpt2Tokenizer::token_bytes(int32_t token) const {
    WEFT_CHECK(token >= 0 && token < vocab_size(),
               "token id {} is outside the GPT-2 vocabulary, expected 0..{}", token,
               vocab_size() - 1);
    return tokens_[token];
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> tokens) const {
    std::string out;
    for (int32_t t : tokens) out += token_bytes(t);
    return out;
}

std::string Gpt2Tokenizer::decode_token(int32_t token) const {
    return token_bytes(token);
}

}  // namespace weft::data
