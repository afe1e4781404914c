#include "weft/data/prepare.hpp"

#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/io.hpp"
#include "weft/data/token_file.hpp"

namespace weft::data {

PrepareResult prepare_dataset(const std::filesystem::path& text_file,
                              const std::filesystem::path& out_dir, const Gpt2Tokenizer& tokenizer,
                              int64_t val_tokens) {
    WEFT_CHECK(val_tokens >= 1, "val_tokens must be at least 1, got {} (preparing '{}')",
               val_tokens, text_file.string());
    WEFT_CHECK(tokenizer.vocab_size() <= 65536,
               "vocabulary of {} tokens does not fit the uint16 token files (at most 65536)",
               tokenizer.vocab_size());
    const std::string text = read_whole_file(text_file, "text file");
    WEFT_CHECK(!text.empty(), "text file '{}' is empty, expected text to tokenize",
               text_file.string());

    PrepareResult result;
    std::vector<uint16_t> tokens;
    tokens.reserve(text.size() / 3);
    const std::string_view all(text), separator("\n\n");
    for (size_t pos = 0;;) {
        size_t cut = all.find(separator, pos);
        size_t end = cut == std::string_view::npos ? all.size() : cut + separator.size();
        tokens.push_back(static_cast<uint16_t>(tokenizer.eot()));
        for (int32_t t : tokenizer.encode_ordinary(all.substr(pos, end - pos)))
            tokens.push_back(static_cast<uint16_t>(t));
        ++result.sections;
        if (cut == std::string_view::npos) break;
        pos = end;
    }
    const auto total = static_cast<int64_t>(tokens.size());
    WEFT_CHECK(total > val_tokens,
               "text file '{}' gives {} tokens, expected more than the {} validation tokens",
               text_file.string(), total, val_tokens);

    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    WEFT_CHECK(!ec, "cannot create output directory '{}': {}", out_dir.string(), ec.message());
    const std::string stem = text_file.stem().string();
    result.val_path = out_dir / (stem + "_val.bin");
    result.train_path = out_dir / (stem + "_train.bin");
    result.val_tokens = val_tokens;
    result.train_tokens = total - val_tokens;
    const std::span<const uint16_t> span(tokens);
    write_token_file(result.val_path, span.first(static_cast<size_t>(val_tokens)));
    write_token_file(result.train_path, span.subspan(static_cast<size_t>(val_tokens)));
    return result;
}

}  // namespace weft::data
