#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/cli/commands.hpp"
#include "weft/data/prepare.hpp"
#include "weft/data/tokenizer.hpp"

namespace weft::cli {

namespace {
struct PrepareArgs {
    std::filesystem::path input = "data/tinyshakespeare.txt", out = "data", tokenizer_dir = "data";
    int64_t val_tokens = 32768;
};
}  // namespace

void add_prepare_command(CLI::App& app) {
    auto a = std::make_shared<PrepareArgs>();
    CLI::App* c =
        app.add_subcommand("prepare",
                           "Tokenise a text file with the GPT-2 BPE into <stem>_train.bin and "
                           "<stem>_val.bin (llm.c's format)");
    c->add_option("--input", a->input, "Text file (UTF-8)")->capture_default_str();
    c->add_option("--out", a->out, "Directory for the token files")->capture_default_str();
    c->add_option("--val-tokens", a->val_tokens,
                  "Tokens from the start that go to the validation file")
        ->capture_default_str();
    c->add_option("--tokenizer-dir", a->tokenizer_dir, "Directory with encoder.json and vocab.bpe")
        ->capture_default_str();
    c->callback([a] {
        auto tok = data::Gpt2Tokenizer::load(a->tokenizer_dir / "encoder.json",
                                             a->tokenizer_dir / "vocab.bpe");
        data::PrepareResult r = data::prepare_dataset(a->input, a->out, tok, a->val_tokens);
        fmt::print("{}: {} tokens\n{}: {} tokens\n", r.train_path.string(), r.train_tokens,
                   r.val_path.string(), r.val_tokens);
    });
}

}  // namespace weft::cli
