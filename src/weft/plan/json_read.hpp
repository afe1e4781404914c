#pragma once
// Strict reading of the planner's JSON files (clusters, models): every error names the file and
// the key path ("configs/clusters/a100.json: device.memory_gib: expected a number, got string"),
// because a planner fed a silently defaulted bandwidth gives confident nonsense.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft::plan {

class JsonReader {
  public:
    // Parses `path`; throws weft::Error naming the file when it is missing or not JSON.
    static JsonReader open(const std::filesystem::path& path);
    JsonReader(std::string file, std::string where, const nlohmann::json& j);

    bool has(const std::string& key) const;
    JsonReader object(const std::string& key) const;
    std::string string(const std::string& key) const;
    double number(const std::string& key) const;
    double positive(const std::string& key) const;      // > 0
    double non_negative(const std::string& key) const;  // >= 0
    int64_t integer(const std::string& key, int64_t min) const;
    bool boolean(const std::string& key) const;
    // The keys of this object, sorted (an object of named entries).
    std::vector<std::string> keys() const;
    double number_or(const std::string& key, double fallback) const;
    // The keys of an object whose values are all positive numbers (e.g. peak_tflops by dtype).
    std::vector<std::pair<std::string, double>> positive_map(const std::string& key) const;
    // Throws naming the first key not in `known` (a typo would otherwise be ignored). Keys
    // "description" and "notes" are always allowed: JSON has no comments.
    void only(const std::vector<std::string>& known) const;

    const std::string& file() const { return file_; }
    std::string path(const std::string& key) const;  // "device.memory_gib"

  private:
    const nlohmann::json& at(const std::string& key) const;
    std::string file_, where_;
    nlohmann::json j_;
};

}  // namespace weft::plan
