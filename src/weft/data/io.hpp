#pragma once
// Small file helpers shared by the data module.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace weft::data {

// The whole file as bytes; `what` says in the error message what the file was for.
std::string read_whole_file(const std::filesystem::path& path, std::string_view what);
// The file parsed as JSON; an error names `what`, the file and where the JSON breaks.
nlohmann::json parse_json(const std::filesystem::path& path, std::string_view what);

}  // namespace weft::data
