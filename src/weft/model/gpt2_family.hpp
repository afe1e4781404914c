#pragma once
// GPT-2 as a registered family (family.hpp): its tensors, presets, counts and Hugging Face
// names.
#include "weft/model/family.hpp"

namespace weft::model {

const Family& gpt2_family();

}  // namespace weft::model
