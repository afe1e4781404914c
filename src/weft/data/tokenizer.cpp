#include "weft/data/tokenizer.hpp"

#include <unordered_map>

#include "weft/core/error.hpp"
#include "weft/data/encoder_json.hpp"
#include "weft/data/io.hpp"
#include "weft/data/pretokenize.hpp"

namespace weft::data {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

// A vocabulary entry spelled in encoder.py's byte alphabet (UTF-8 text) -> its raw bytes.
std::string unmap_bytes(std::string_view spelled, const std::filesystem::path& path) {
    std::optional<std::string> bytes = byte_level_unspell(spelled);
    WEFT_CHECK(bytes.has_value(), "{}: token '{}' has a character outside GPT-2's byte alphabet",
               path.string(), spelled);
    return *std::move(bytes);
}

// vocab.bpe: a "#version" line, then one merge "left right" a line, best (rank 0) first. Calls
// fn(line, index of its space, line number) for each merge, spelled as in the file.
template <typename Fn>
void for_each_merge(std::string_view text, const std::filesystem::path& vocab_bpe, Fn&& fn) {
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
        fn(line, space, line_no);
    }
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer() = default;
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Gpt2Tokenizer Gpt2Tokenizer::load(const std::filesystem::path& encoder_json,
                                  const std::filesystem::path& vocab_bpe) {
    Gpt2Tokenizer tok;

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
        std::string bytes = unmap_bytes(spelled, encoder_json);
        if (bytes == kEndOfText) tok.eot_ = static_cast<int32_t>(id);
        tok.tokens_[id] = bytes;
        ids.emplace(std::move(bytes), static_cast<int32_t>(id));
    }
    WEFT_CHECK(tok.eot_ >= 0, "{}: no '{}' token", encoder_json.string(), kEndOfText);
    for (int b = 0; b < 256; ++b) {
        auto it = ids.find(std::string(1, static_cast<char>(b)));
        WEFT_CHECK(it != ids.end(), "{}: no token for byte 0x{:02X}; byte-level BPE needs all 256",
                   encoder_json.string(), b);
        tok.bpe_.set_byte_token(static_cast<uint8_t>(b), it->second);
    }

    const std::string text = read_whole_file(vocab_bpe, "GPT-2 vocab.bpe");
    auto id_of = [&](const std::string& bytes, std::string_view line, size_t line_no) {
        auto it = ids.find(bytes);
        WEFT_CHECK(it != ids.end(), "{}:{}: merge '{}' uses or makes a token missing from {}",
                   vocab_bpe.string(), line_no, line, encoder_json.string());
        return it->second;
    };
    for_each_merge(text, vocab_bpe, [&](std::string_view line, size_t space, size_t line_no) {
        std::string left = unmap_bytes(line.substr(0, space), vocab_bpe);
        std::string right = unmap_bytes(line.substr(space + 1), vocab_bpe);
        int32_t a = id_of(left, line, line_no), b = id_of(right, line, line_no);
        int32_t result = id_of(left + right, line, line_no);
        WEFT_CHECK(tok.bpe_.add_merge(a, b, result), "{}:{}: merge '{}' appears twice",
                   vocab_bpe.string(), line_no, line);
    });
    WEFT_CHECK(tok.bpe_.merge_count() > 0, "{}: no merges", vocab_bpe.string());
    return tok;
}

std::vector<int32_t> Gpt2Tokenizer::encode_ordinary(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3);
    for (size_t pos = 0; pos < text.size();) {
        size_t end = pretoken_end(text, pos);
        bpe_.encode(text.substr(pos, end - pos), out);
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

Gpt2Spelling read_gpt2_spelling(const std::filesystem::path& encoder_json,
                                const std::filesystem::path& vocab_bpe) {
    // Loading checks the files as every other command sees them (ids, alphabet, merges).
    const Gpt2Tokenizer tok = Gpt2Tokenizer::load(encoder_json, vocab_bpe);
    Gpt2Spelling s;
    s.eot = tok.eot();
    s.tokens.resize(size_t(tok.vocab_size()));
    for (auto& [spelled, id] :
         parse_string_int_object(read_whole_file(encoder_json, "GPT-2 encoder.json"), encoder_json))
        s.tokens[size_t(id)] = std::move(spelled);
    for_each_merge(read_whole_file(vocab_bpe, "GPT-2 vocab.bpe"), vocab_bpe,
                   [&](std::string_view line, size_t, size_t) { s.merges.emplace_back(line); });
    return s;
}

}  // namespace weft::data
