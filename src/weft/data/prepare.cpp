#include "weft/data/prepare.hpp"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/io.hpp"
#include "weft/data/pretokenize.hpp"
#include "weft/data/token_file.hpp"

namespace weft::data {

namespace {

// Token ids of the whole text, as `Id` (uint16_t for vocabularies that fit, else uint32_t: half
// the memory for the common case of a corpus of GPT-2 tokens), and in `starts` where each
// section (a document) begins: at its end-of-text token.
template <typename Id>
std::vector<Id> tokenize_sections(std::string_view all, const Tokenizer& tokenizer,
                                  PrepareResult& result, std::vector<int64_t>& starts) {
    std::vector<Id> tokens;
    tokens.reserve(all.size() / 3);
    const std::string_view separator("\n\n");
    for (size_t pos = 0;;) {
        size_t cut = all.find(separator, pos);
        size_t end = cut == std::string_view::npos ? all.size() : cut + separator.size();
        starts.push_back(int64_t(tokens.size()));
        tokens.push_back(static_cast<Id>(tokenizer.eot()));
        for (int32_t t : tokenizer.encode_ordinary(all.substr(pos, end - pos)))
            tokens.push_back(static_cast<Id>(t));
        ++result.sections;
        if (cut == std::string_view::npos) break;
        pos = end;
    }
    return tokens;
}

// A binary file, or text in another encoding, would tokenize without complaint into byte tokens
// that look like a corpus: refused at its first byte that UTF-8 text does not hold.
void check_utf8_text(std::string_view text, const std::filesystem::path& file) {
    int64_t line = 1;
    for (size_t pos = 0; pos < text.size();) {
        const Utf8Char c = decode_utf8(text, pos);
        WEFT_CHECK(c.valid && c.code_point != 0,
                   "text file '{}' is not UTF-8 text: byte {:#04x} at offset {} (line {}) {}; "
                   "expected a UTF-8 text file",
                   file.string(), static_cast<unsigned char>(text[pos]), pos, line,
                   c.code_point == 0 ? "is a NUL, as in binary files" : "is not valid UTF-8");
        line += text[pos] == '\n';
        pos += c.length;
    }
}

// The token files and their document indexes. A document the split cuts continues at the start
// of the training file, which is therefore always a document start.
template <typename Id>
void write_split(const std::vector<Id>& tokens, const std::vector<int64_t>& starts,
                 int64_t val_tokens, const std::filesystem::path& out_dir, const std::string& stem,
                 PrepareResult& result) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    WEFT_CHECK(!ec, "cannot create output directory '{}': {}", out_dir.string(), ec.message());
    result.val_path = out_dir / (stem + "_val.bin");
    result.train_path = out_dir / (stem + "_train.bin");
    result.val_tokens = val_tokens;
    result.train_tokens = int64_t(tokens.size()) - val_tokens;
    const std::span<const Id> span(tokens);
    write_token_file(result.val_path, span.first(static_cast<size_t>(val_tokens)));
    write_token_file(result.train_path, span.subspan(static_cast<size_t>(val_tokens)));
    const auto cut = std::lower_bound(starts.begin(), starts.end(), val_tokens);
    const std::vector<int64_t> val(starts.begin(), cut);
    std::vector<int64_t> train{0};
    for (auto it = cut; it != starts.end(); ++it)
        if (*it > val_tokens) train.push_back(*it - val_tokens);
    write_doc_index(doc_index_path(result.val_path), val, val_tokens);
    write_doc_index(doc_index_path(result.train_path), train, result.train_tokens);
    result.val_documents = int64_t(val.size());
    result.train_documents = int64_t(train.size());
}

}  // namespace

PrepareResult prepare_dataset(const std::filesystem::path& text_file,
                              const std::filesystem::path& out_dir, const Tokenizer& tokenizer,
                              int64_t val_tokens) {
    WEFT_CHECK(val_tokens >= 1, "val_tokens must be at least 1, got {} (preparing '{}')",
               val_tokens, text_file.string());
    const std::string text = read_whole_file(text_file, "text file");
    WEFT_CHECK(!text.empty(), "text file '{}' is empty, expected text to tokenize",
               text_file.string());
    check_utf8_text(text, text_file);

    PrepareResult result;
    const bool wide = tokenizer.vocab_size() > 65536;
    std::vector<uint16_t> tokens16;
    std::vector<uint32_t> tokens32;
    std::vector<int64_t> starts;
    if (wide) {
        tokens32 = tokenize_sections<uint32_t>(text, tokenizer, result, starts);
    } else {
        tokens16 = tokenize_sections<uint16_t>(text, tokenizer, result, starts);
    }
    const auto total = static_cast<int64_t>(wide ? tokens32.size() : tokens16.size());
    WEFT_CHECK(total > val_tokens,
               "text file '{}' gives {} tokens, expected more than the {} validation tokens",
               text_file.string(), total, val_tokens);

    const std::string stem = text_file.stem().string();
    if (wide) {
        write_split(tokens32, starts, val_tokens, out_dir, stem, result);
    } else {
        write_split(tokens16, starts, val_tokens, out_dir, stem, result);
    }
    return result;
}

PrepareResult write_documents(const std::vector<uint16_t>& tokens,
                              const std::vector<int64_t>& starts,
                              const std::filesystem::path& out_dir, const std::string& stem,
                              int64_t val_tokens) {
    WEFT_CHECK(val_tokens >= 1 && int64_t(tokens.size()) > val_tokens,
               "{} tokens of documents, expected more than the {} validation tokens (--val-tokens "
               "at least 1)",
               tokens.size(), val_tokens);
    PrepareResult result;
    result.sections = int64_t(starts.size());
    write_split(tokens, starts, val_tokens, out_dir, stem, result);
    return result;
}

}  // namespace weft::data
