#pragma once
// The tokenizer interface the data pipeline and the commands take, and GPT-2's tokenizer.
//
// GPT-2's byte-level BPE, token for token what OpenAI's encoder.py produces: the text is split by
// GPT-2's pre-tokenisation regex (pretokenize.hpp), each piece's UTF-8 bytes are merged by the
// ranks of vocab.bpe, and the merged byte strings are looked up in encoder.json.
//
// Internally tokens are raw byte strings: encoder.json and vocab.bpe spell bytes through
// encoder.py's byte -> printable-character table, which is undone once at load.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/data/bpe.hpp"

namespace weft::data {

// A text <-> token ids mapping. Implementations are immutable once loaded, so one may be shared
// between threads.
class Tokenizer {
  public:
    virtual ~Tokenizer() = default;

    // The tokenizer's special tokens in the text become their ids (tiktoken's
    // encode(allowed_special="all"), Hugging Face's encode(add_special_tokens=False)).
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    // All of the text is ordinary text, special tokens' names included.
    virtual std::vector<int32_t> encode_ordinary(std::string_view text) const = 0;
    // The bytes of the tokens, concatenated; an id with no token is an error.
    virtual std::string decode(std::span<const int32_t> tokens) const = 0;
    // One token's bytes: may be part of a UTF-8 sequence.
    virtual std::string decode_token(int32_t token) const = 0;
    // The token put between documents.
    virtual int32_t eot() const = 0;
    // One past the largest id.
    virtual int32_t vocab_size() const = 0;

  protected:
    Tokenizer() = default;
    Tokenizer(const Tokenizer&) = default;
    Tokenizer(Tokenizer&&) = default;
    Tokenizer& operator=(const Tokenizer&) = default;
    Tokenizer& operator=(Tokenizer&&) = default;
};

// `path` is a Hugging Face tokenizer.json or a directory holding one (hf_tokenizer.hpp says
// which kinds are read and how the end-of-text token is chosen).
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);
// What the commands' --tokenizer and --tokenizer-dir flags name: the tokenizer.json (or a
// directory holding one) when `tokenizer` is given, else GPT-2's encoder.json and vocab.bpe in
// `gpt2_dir`.
std::unique_ptr<Tokenizer> open_tokenizer(const std::filesystem::path& tokenizer,
                                          const std::filesystem::path& gpt2_dir);

class Gpt2Tokenizer final : public Tokenizer {
  public:
    static Gpt2Tokenizer load(const std::filesystem::path& encoder_json,
                              const std::filesystem::path& vocab_bpe);

    // "<|endoftext|>" in the text becomes the end-of-text token, as tiktoken's
    // encode(allowed_special="all") does; the text between is encoded with encode_ordinary.
    std::vector<int32_t> encode(std::string_view text) const override;
    // encoder.py's encode: "<|endoftext|>" is ordinary text. Used by prepare_dataset, so that the
    // only end-of-text tokens in a token file are the ones it puts between documents.
    std::vector<int32_t> encode_ordinary(std::string_view text) const override;

    // The bytes of the tokens, concatenated; an id outside [0, vocab_size) is an error.
    std::string decode(std::span<const int32_t> tokens) const override;
    // One token's bytes: may be part of a UTF-8 sequence.
    std::string decode_token(int32_t token) const override;

    int32_t eot() const override { return eot_; }  // 50256 for GPT-2
    int32_t vocab_size() const override {
        return static_cast<int32_t>(tokens_.size());  // 50257
    }

    Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
    Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
    ~Gpt2Tokenizer();

  private:
    Gpt2Tokenizer();
    const std::string& token_bytes(int32_t token) const;

    std::vector<std::string> tokens_;  // id -> bytes
    BpeModel bpe_;
    int32_t eot_ = -1;
};

// GPT-2's encoder.json tokens in id order and vocab.bpe's merges, spelled as the files spell them
// (GPT-2's byte -> character alphabet): what a GGUF file's "gpt2" tokenizer holds. The files are
// checked as Gpt2Tokenizer::load checks them.
struct Gpt2Spelling {
    std::vector<std::string> tokens, merges;
    int32_t eot = -1;
};
Gpt2Spelling read_gpt2_spelling(const std::filesystem::path& encoder_json,
                                const std::filesystem::path& vocab_bpe);

}  // namespace weft::data
