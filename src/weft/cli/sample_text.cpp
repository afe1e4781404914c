#include "weft/cli/sample_text.hpp"

#include "weft/data/tokenizer.hpp"

namespace weft::cli {

void sample_text(const train::LoadedModel& m, const data::Tokenizer& tok, const std::string& prompt,
                 const model::SampleOptions& o, std::FILE* out) {
    std::vector<int32_t> ids = tok.encode(prompt);
    if (ids.empty()) ids.push_back(tok.eot());
    std::fputs(prompt.c_str(), out);
    // Byte-level BPE: the bytes of successive tokens concatenate to the text, even where one
    // character spans two tokens.
    model::generate(m.model->config(), m.model->layout(), m.params.data(), ids, o, [&](int32_t t) {
        std::string bytes = tok.decode_token(t);
        std::fwrite(bytes.data(), 1, bytes.size(), out);
        std::fflush(out);
    });
    std::fputs("\n", out);
}

}  // namespace weft::cli
