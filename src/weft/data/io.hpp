#pragma once
// Small file helpers shared by the data module.
#include <filesystem>
#include <string>
#include <string_view>

namespace weft::data {

// The whole file as bytes; `what` says in the error message what the file was for.
std::string read_whole_file(const std::filesystem::path& path, std::string_view what);

}  // namespace weft::data
