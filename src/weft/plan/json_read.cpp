#include "weft/plan/json_read.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>

#include "weft/core/error.hpp"

namespace weft::plan {

JsonReader JsonReader::open(const std::filesystem::path& path) {
    std::ifstream f(path);
    WEFT_CHECK(f.good(), "{}: cannot open the file", path.string());
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", path.string(), e.what());
    }
    WEFT_CHECK(j.is_object(), "{}: expected a JSON object at the top, got {}", path.string(),
               j.type_name());
    return JsonReader(path.string(), "", j);
}

JsonReader::JsonReader(std::string file, std::string where, const nlohmann::json& j)
    : file_(std::move(file)), where_(std::move(where)), j_(j) {}

std::string JsonReader::path(const std::string& key) const {
    return where_.empty() ? key : where_ + "." + key;
}

bool JsonReader::has(const std::string& key) const {
    return j_.contains(key);
}

const nlohmann::json& JsonReader::at(const std::string& key) const {
    auto it = j_.find(key);
    WEFT_CHECK(it != j_.end(), "{}: missing key '{}'", file_, path(key));
    return *it;
}

JsonReader JsonReader::object(const std::string& key) const {
    const nlohmann::json& v = at(key);
    WEFT_CHECK(v.is_object(), "{}: {}: expected an object, got {}", file_, path(key),
               v.type_name());
    return JsonReader(file_, path(key), v);
}

std::string JsonReader::string(const std::string& key) const {
    const nlohmann::json& v = at(key);
    WEFT_CHECK(v.is_string(), "{}: {}: expected a string, got {}", file_, path(key), v.type_name());
    return v.get<std::string>();
}

double JsonReader::number(const std::string& key) const {
    const nlohmann::json& v = at(key);
    WEFT_CHECK(v.is_number(), "{}: {}: expected a number, got {}", file_, path(key), v.type_name());
    return v.get<double>();
}

double JsonReader::positive(const std::string& key) const {
    double x = number(key);
    WEFT_CHECK(x > 0, "{}: {}: must be positive, got {}", file_, path(key), x);
    return x;
}

double JsonReader::non_negative(const std::string& key) const {
    double x = number(key);
    WEFT_CHECK(x >= 0, "{}: {}: must not be negative, got {}", file_, path(key), x);
    return x;
}

int64_t JsonReader::integer(const std::string& key, int64_t min) const {
    const nlohmann::json& v = at(key);
    WEFT_CHECK(v.is_number_integer(), "{}: {}: expected an integer, got {}", file_, path(key),
               v.is_number() ? fmt::format("{}", v.get<double>()) : v.type_name());
    int64_t x = v.get<int64_t>();
    WEFT_CHECK(x >= min, "{}: {}: must be at least {}, got {}", file_, path(key), min, x);
    return x;
}

bool JsonReader::boolean(const std::string& key) const {
    const nlohmann::json& v = at(key);
    WEFT_CHECK(v.is_boolean(), "{}: {}: expected true or false, got {}", file_, path(key),
               v.type_name());
    return v.get<bool>();
}

std::vector<std::string> JsonReader::keys() const {
    std::vector<std::string> k;
    for (auto it = j_.begin(); it != j_.end(); ++it) k.push_back(it.key());
    return k;
}

double JsonReader::number_or(const std::string& key, double fallback) const {
    return has(key) ? number(key) : fallback;
}

std::vector<std::pair<std::string, double>> JsonReader::positive_map(const std::string& key) const {
    JsonReader o = object(key);
    std::vector<std::pair<std::string, double>> out;
    for (auto it = o.j_.begin(); it != o.j_.end(); ++it)
        out.emplace_back(it.key(), o.positive(it.key()));
    WEFT_CHECK(!out.empty(), "{}: {}: expected at least one entry", file_, path(key));
    return out;
}

void JsonReader::only(const std::vector<std::string>& known) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
        const std::string& k = it.key();
        if (k == "description" || k == "notes") continue;
        WEFT_CHECK(std::find(known.begin(), known.end(), k) != known.end(),
                   "{}: unknown key '{}' (expected one of: {})", file_, path(k),
                   fmt::format("{}", fmt::join(known, ", ")));
    }
}

}  // namespace weft::plan
