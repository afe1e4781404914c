#pragma once
// Llama as a registered family (family.hpp): its tensors, presets, counts and Hugging Face
// names and config.
#include "weft/model/family.hpp"

namespace weft::model {

const Family& llama_family();

}  // namespace weft::model
