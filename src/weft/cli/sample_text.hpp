#pragma once
// Prints the prompt and its continuation as the tokens arrive (`weft sample`), up to the
// tokenizer's end-of-text token unless `ignore_eos`; with speculation (`spec`, and `draft` for
// --spec draft), its figures on stderr at the end. Under tensor parallelism (`tp`, the model's
// group) every rank generates alike and rank 0 prints.
#include <cstdio>
#include <filesystem>
#include <string>

#include "weft/data/tokenizer.hpp"
#include "weft/decode/speculative.hpp"
#include "weft/model/generate.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

void sample_text(const train::LoadedModel& m, const data::Tokenizer& tok, const std::string& prompt,
                 const model::SampleOptions& o, bool ignore_eos, bool bf16,
                 const decode::SpecOptions& spec, decode::DraftModel* draft, std::FILE* out,
                 model::TpComm* tp = nullptr);

}  // namespace weft::cli
