#pragma once
// Qwen2 as a registered family (family.hpp): the Llama model with q/k/v biases, its presets and
// its Hugging Face config.
#include "weft/model/family.hpp"

namespace weft::model {

const Family& qwen2_family();

}  // namespace weft::model
