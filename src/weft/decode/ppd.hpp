#pragma once
// Parallel Prompt Decoding (Chen et al. 2024, "Hardware-aware parallel prompt decoding"): k
// trained input embeddings (decode/ppd_file.hpp, trained by train/ppd_train.hpp) appended after
// a token guess the k tokens that follow the model's next one. Every verify forward carries,
// after its tree of guesses, a chain of the k prompt rows under each node of the tree: whichever
// prefix the verdict keeps, the chain under its last node has read exactly the kept text, so the
// same forward that verified this step's guesses made the next step's (one forward a step, no
// guess pass). The prompt rows come after the tree's and no tree row attends to them, so the
// verified logits and the output are plain decoding's (speculative.hpp).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "weft/decode/ppd_file.hpp"
#include "weft/decode/speculative.hpp"

namespace weft::decode {

// generate_speculative for --spec ppd: the guesses are `ppd`'s, a chain of up to its k tokens
// and at most `max_guesses` (--spec-tokens: fewer guesses, fewer prompt chains, fewer rows).
std::vector<int32_t> generate_ppd(const model::ModelConfig& cfg, const model::ParamLayout& layout,
                                  const float* params, std::span<const int32_t> prompt,
                                  const model::SampleOptions& o, const PpdPrompts& ppd,
                                  int max_guesses, const std::function<void(int32_t)>& on_token,
                                  bool bf16, SpecStats* stats);

}  // namespace weft::decode
