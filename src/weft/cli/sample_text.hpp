#pragma once
// Prints the prompt and its continuation as the tokens arrive (`weft sample`).
#include <cstdio>
#include <filesystem>
#include <string>

#include "weft/data/tokenizer.hpp"
#include "weft/model/generate.hpp"
#include "weft/train/model_source.hpp"

namespace weft::cli {

void sample_text(const train::LoadedModel& m, const data::Tokenizer& tok, const std::string& prompt,
                 const model::SampleOptions& o, std::FILE* out);

}  // namespace weft::cli
