#include "weft/data/io.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "weft/core/error.hpp"

namespace weft::data {

std::string read_whole_file(const std::filesystem::path& path, std::string_view what) {
    std::error_code ec;
    WEFT_CHECK(std::filesystem::is_regular_file(path, ec),
               "{} '{}' does not exist or is not a file", what, path.string());
    std::ifstream in(path, std::ios::binary);
    WEFT_CHECK(in, "cannot open {} '{}': {}", what, path.string(), std::strerror(errno));
    std::string bytes;
    in.seekg(0, std::ios::end);
    bytes.resize(static_cast<size_t>(in.tellg()));
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    WEFT_CHECK(in.gcount() == static_cast<std::streamsize>(bytes.size()),
               "reading {} '{}' stopped after {} of {} bytes", what, path.string(), in.gcount(),
               bytes.size());
    return bytes;
}

nlohmann::json parse_json(const std::filesystem::path& path, std::string_view what) {
    const std::string text = read_whole_file(path, what);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        fail("{} '{}' is not valid JSON: {}", what, path.string(), e.what());
    }
}

}  // namespace weft::data
