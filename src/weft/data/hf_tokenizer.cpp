#include "weft/data/hf_tokenizer.hpp"

#include "weft/core/error.hpp"
#include "weft/data/hf_tokenizer_impl.hpp"
#include "weft/data/pretokenize.hpp"
#include "weft/data/unicode_nfc.hpp"

namespace weft::data {

namespace {

size_t split_end(HfSplitRegex regex, std::string_view text, size_t begin) {
    switch (regex) {
        case HfSplitRegex::kGpt2:
            return pretoken_end(text, begin);
        case HfSplitRegex::kLlama3:
            return pretoken_end_llama3(text, begin, 3);
        case HfSplitRegex::kQwen2:
            return pretoken_end_llama3(text, begin, 1);
    }
    return text.size();
}

// Runs pre-tokenizers [step, end) over `piece`, then the model over each pre-token. Each
// pre-tokenizer splits the pieces the one before it made, as Hugging Face's PreTokenizedString
// does; so ByteLevel's prefix space goes before every piece an earlier Split or Digits cut.
void pre_tokenize_and_encode(const HfTokenizer::Impl& impl, size_t step, std::string_view piece,
                             std::vector<int32_t>& out) {
    if (piece.empty()) return;
    if (step == impl.pre_tokenizers.size()) {
        if (impl.ignore_merges) {
            if (auto it = impl.model_ids.find(piece); it != impl.model_ids.end()) {
                out.push_back(it->second);
                return;
            }
        }
        impl.bpe.encode(piece, out);
        return;
    }
    const HfPreTokenizer& p = impl.pre_tokenizers[step];
    std::string prefixed;
    if (p.kind == HfPreTokenizer::Kind::kByteLevel) {
        if (p.add_prefix_space && piece.front() != ' ') {
            prefixed = " ";
            prefixed += piece;
            piece = prefixed;
        }
        if (!p.use_regex) return pre_tokenize_and_encode(impl, step + 1, piece, out);
    }
    for (size_t pos = 0; pos < piece.size();) {
        size_t end = p.kind == HfPreTokenizer::Kind::kDigits
                         ? pretoken_end_digits(piece, pos, p.individual_digits)
                     : p.kind == HfPreTokenizer::Kind::kSplit ? split_end(p.regex, piece, pos)
                                                              : pretoken_end(piece, pos);
        pre_tokenize_and_encode(impl, step + 1, piece.substr(pos, end - pos), out);
        pos = end;
    }
}

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

int32_t HfTokenizer::eot() const {
    return impl_->eot;
}
int32_t HfTokenizer::vocab_size() const {
    return static_cast<int32_t>(impl_->tokens.size());
}

// Text between added tokens: normalised, pre-tokenised, encoded.
void HfTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    if (impl_->nfc && !is_nfc_quick(text)) {
        const std::string normalized = to_nfc(text);
        pre_tokenize_and_encode(*impl_, 0, normalized, out);
    } else {
        pre_tokenize_and_encode(*impl_, 0, text, out);
    }
}

std::vector<int32_t> HfTokenizer::encode_ordinary(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3);
    encode_segment(text, out);
    return out;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3);
    size_t segment = 0;
    for (size_t pos = 0; pos < text.size(); ++pos) {
        // Longest first, so the first that matches is the longest starting here.
        for (const Impl::AddedToken& a :
             impl_->added_by_first_byte[static_cast<unsigned char>(text[pos])]) {
            if (text.substr(pos, a.content.size()) != a.content) continue;
            encode_segment(text.substr(segment, pos - segment), out);
            out.push_back(a.id);
            segment = pos + a.content.size();
            pos = segment - 1;
            break;
        }
    }
    encode_segment(text.substr(segment), out);
    return out;
}

const std::string& HfTokenizer::token_bytes(int32_t token) const {
    WEFT_CHECK(token >= 0 && token < vocab_size() && impl_->has_token[token],
               "token id {} is not in the tokenizer's vocabulary (ids 0..{})", token,
               vocab_size() - 1);
    return impl_->tokens[token];
}

std::string HfTokenizer::decode_token(int32_t token) const {
    return token_bytes(token);
}

std::string HfTokenizer::decode(std::span<const int32_t> tokens) const {
    std::string out;
    for (int32_t t : tokens) out += token_bytes(t);
    return out;
}

}  // namespace weft::data
