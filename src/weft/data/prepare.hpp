#pragma once
// Text -> train/val token files, as llm.c's dev/data/tinyshakespeare.py does it.
//
// The text is split into sections at every "\n\n". Each section is encoded (ordinary encoding:
// a literal "<|endoftext|>" in the text stays text) with its "\n\n" still on the end, all but the
// last section having one, and preceded by the end-of-text token. So the rule is: the tokens
// without their end-of-text tokens decode to the text, byte for byte (to its NFC form when the
// tokenizer normalises so). The first `val_tokens` tokens go to <stem>_val.bin, the rest to
// <stem>_train.bin, both in llm.c's format: uint16 ids (version 1) for a vocabulary of at most
// 65536 ids, uint32 (llm.c's Llama 3 layout) when an id past 65535 occurs.
//
// Each section is a document: its start (its end-of-text token) goes into the document index
// beside each file, <stem>_val.idx and <stem>_train.idx (doc_index.hpp), which --pack documents
// reads. A section the split cuts in two is a document in each file.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "weft/data/tokenizer.hpp"

namespace weft::data {

struct PrepareResult {
    std::filesystem::path train_path, val_path;
    int64_t train_tokens = 0, val_tokens = 0;
    int64_t sections = 0;                            // end-of-text tokens written
    int64_t train_documents = 0, val_documents = 0;  // in each file's index
};

// Errors before any file is written when the text is missing, empty or not UTF-8 (a NUL byte or
// an invalid sequence, named by its offset), or gives no more than
// `val_tokens` tokens (which would leave nothing to train on). Creates out_dir if needed.
PrepareResult prepare_dataset(const std::filesystem::path& text_file,
                              const std::filesystem::path& out_dir, const Tokenizer& tokenizer,
                              int64_t val_tokens = 32768);

// Tokens already made, documents starting at `starts` (0 first): <stem>_val.bin and
// <stem>_train.bin and their indexes in out_dir, as prepare_dataset writes them (the synthetic
// corpus, synthetic.hpp). Errors when nothing would be left to train on.
PrepareResult write_documents(const std::vector<uint16_t>& tokens,
                              const std::vector<int64_t>& starts,
                              const std::filesystem::path& out_dir, const std::string& stem,
                              int64_t val_tokens);

}  // namespace weft::data
