#include "weft/cli/sample_text.hpp"

#include "weft/data/tokenizer.hpp"

namespace weft::cli {

void sample_text(const train::LoadedModel& m, const data::Tokenizer& tok, const std::string& prompt,
                 const model::SampleOptions& o, bool ignore_eos, std::FILE* out) {
    std::vector<int32_t> ids = tok.encode(prompt);
    if (ids.empty()) ids.push_back(tok.eot());
    model::check_prompt(m.model->config(), ids);  // before anything is printed
    // Ids past the tokenizer's could not be written out.
    model::SampleOptions within = o;
    within.vocab_limit = tok.vocab_size();
    // As transformers' generate stops at eos_token_id: the model says the text is over.
    if (!ignore_eos) within.stop_token = tok.eot();
    std::fputs(prompt.c_str(), out);
    // Byte-level BPE: the bytes of successive tokens concatenate to the text, even where one
    // character spans two tokens.
    model::generate(m.model->config(), m.model->layout(), m.params.data(), ids, within,
                    [&](int32_t t) {
                        std::string bytes = tok.decode_token(t);
                        std::fwrite(bytes.data(), 1, bytes.size(), out);
                        std::fflush(out);
                    });
    std::fputs("\n", out);
}

}  // namespace weft::cli
