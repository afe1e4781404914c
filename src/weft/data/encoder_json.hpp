#pragma once
// A reader for GPT-2's encoder.json: one flat JSON object of string keys and integer values.
// weft_data does not link a JSON library, and this shape needs only strings (with every JSON
// escape, \uXXXX and surrogate pairs included) and integers.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::data {

// Keys come back as UTF-8, in file order. `path` only names the file in error messages.
std::vector<std::pair<std::string, int64_t>> parse_string_int_object(
    std::string_view json, const std::filesystem::path& path);

}  // namespace weft::data
