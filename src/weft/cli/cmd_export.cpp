#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "weft/ckpt/gguf.hpp"
#include "weft/cli/commands.hpp"
#include "weft/cli/output_paths.hpp"
#include "weft/core/error.hpp"
#include "weft/data/hf_tokenizer.hpp"
#include "weft/data/tokenizer.hpp"
#include "weft/model/gguf_export.hpp"
#include "weft/model/state_io.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

namespace {
struct ExportArgs {
    std::filesystem::path ckpt, out, tokenizer_dir = "data", tokenizer;
    std::string format = "hf", gguf_type;
};

// The vocabulary written into a GGUF: a Hugging Face tokenizer.json's when --tokenizer names one,
// else GPT-2's files in --tokenizer-dir.
model::GgufBpeVocab gguf_vocab(const ExportArgs& a) {
    if (!a.tokenizer.empty()) {
        data::HfSpelling s = data::read_hf_spelling(a.tokenizer);
        return {std::move(s.tokens), std::move(s.merges), s.eos, std::move(s.types), s.bos,
                std::move(s.pre)};
    }
    data::Gpt2Spelling s =
        data::read_gpt2_spelling(a.tokenizer_dir / "encoder.json", a.tokenizer_dir / "vocab.bpe");
    model::GgufBpeVocab v;
    v.tokens = std::move(s.tokens);
    v.merges = std::move(s.merges);
    v.eot = s.eot;
    return v;
}

// llama.cpp's GGUF of a checkpoint, with the vocabulary of gguf_vocab.
// Every input is checked (the type, the family, the tokenizer against the model) before the
// weights are read.
void export_checkpoint_to_gguf(const ExportArgs& a) {
    const ckpt::GgmlType type = ckpt::parse_ggml_type(
        a.gguf_type.empty() ? "f32" : std::string_view(a.gguf_type), "--gguf-type");
    check_output_paths({{a.out, "--out", false}});
    const train::ModelSource source = train::open_model_source({}, a.ckpt);
    const model::GgufBpeVocab vocab = gguf_vocab(a);
    model::check_gguf_export(source.cfg, vocab);
    train::LoadedModel m = train::load_model(source);
    model::write_gguf_model(a.out, m.model->config(), m.model->layout(), m.params.data(), type,
                            vocab);
    fmt::print("wrote {} ({})\n", a.out.string(), ckpt::ggml_type_name(type));
}

}  // namespace

void add_export_command(CLI::App& app) {
    auto a = std::make_shared<ExportArgs>();
    CLI::App* c =
        app.add_subcommand("export",
                           "Write a checkpoint as a Hugging Face model directory (config.json, "
                           "model.safetensors or its sharded index) that transformers loads as "
                           "GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM or "
                           "Qwen2ForCausalLM, by the model's family; or, with --format gguf, "
                           "one GGUF file that llama.cpp loads");
    c->add_option("--ckpt", a->ckpt, "weft checkpoint, or a run directory (its latest)")
        ->required();
    c->add_option("--out", a->out,
                  "Directory to write (created; an existing one must hold only "
                  "a previous export); with --format gguf the file to write")
        ->required();
    c->add_option("--format", a->format,
                  "hf: a Hugging Face directory; gguf: llama.cpp's file format")
        ->check(CLI::IsMember({"hf", "gguf"}));
    c->add_option("--gguf-type", a->gguf_type,
                  "With --format gguf: the matrices' type, f32 (default), f16 or bf16; norms stay "
                  "f32");
    CLI::Option* dir = c->add_option(
        "--tokenizer-dir", a->tokenizer_dir,
        "With --format gguf: the directory of GPT-2's encoder.json and vocab.bpe, the "
        "vocabulary written into the file");
    c->add_option("--tokenizer", a->tokenizer,
                  "With --format gguf: a Hugging Face tokenizer.json (or its directory) of "
                  "byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) to write in place of GPT-2's")
        ->excludes(dir);
    c->callback([a, c] {
        if (a->format == "gguf") return export_checkpoint_to_gguf(*a);
        for (const char* flag : {"--gguf-type", "--tokenizer-dir", "--tokenizer"})
            WEFT_CHECK(c->count(flag) == 0, "{} applies to --format gguf only (--format is {})",
                       flag, a->format);
        check_output_paths({{a->out, "--out", true}});
        export_checkpoint_to_hf(a->ckpt, a->out, "--out");
    });
}

void export_checkpoint_to_hf(const std::filesystem::path& ckpt, const std::filesystem::path& out,
                             const char* out_flag) {
    namespace fs = std::filesystem;
    if (fs::exists(out)) {
        WEFT_CHECK(fs::is_directory(out), "{} {} exists and is not a directory", out_flag,
                   out.string());
        for (const auto& e : fs::directory_iterator(out)) {
            std::string n = e.path().filename().string();
            WEFT_CHECK(n == "config.json" || n == "model.safetensors",
                       "{} {} holds {}, which an export would delete; choose an empty or "
                       "new directory",
                       out_flag, out.string(), n);
        }
    }
    train::LoadedModel m = train::load_model({}, ckpt);
    model::write_hf_model(out, m.model->config(), m.model->layout(), m.params.data());
    fmt::print("wrote {}\n", out.string());
}

}  // namespace weft::cli
