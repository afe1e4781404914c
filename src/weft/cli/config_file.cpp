#include "weft/cli/config_file.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "weft/core/error.hpp"

namespace weft::cli {

namespace {

std::string value_text(const toml::node& v, const std::string& file, const std::string& key) {
    if (auto s = v.value<std::string>(); s && v.is_string()) return *s;
    if (v.is_boolean()) return *v.value<bool>() ? "true" : "false";
    if (v.is_integer()) return std::to_string(*v.value<int64_t>());
    if (v.is_floating_point()) return fmt::format("{}", *v.value<double>());
    if (const toml::array* a = v.as_array()) {
        std::string out;
        for (const toml::node& e : *a) {
            if (!out.empty()) out += ",";
            out += value_text(e, file, key);
        }
        return out;
    }
    fail("{}: key '{}' has a value of a kind flags cannot take (a table or a date)", file, key);
}

}  // namespace

std::vector<std::string> expand_config(int argc, char** argv, CLI::App& app) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) return args;
    CLI::App* sub = nullptr;
    for (CLI::App* s : app.get_subcommands({}))
        if (s->get_name() == args[0]) sub = s;
    if (!sub) return args;

    std::string file;
    size_t at = 0, width = 0;
    // Words after `--` belong to another command (`weft run -- ... weft train --config F`).
    for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
        if (args[i] == "--config" && i + 1 < args.size()) {
            file = args[i + 1], at = i, width = 2;
        } else if (args[i].rfind("--config=", 0) == 0) {
            file = args[i].substr(9), at = i, width = 1;
        }
    }
    if (file.empty()) return args;
    args.erase(args.begin() + long(at), args.begin() + long(at + width));

    toml::table table;
    try {
        table = toml::parse_file(file);
    } catch (const toml::parse_error& e) {
        const auto& where = e.source().begin;
        fail("config file {}: {} (line {}, column {})", file, e.description(), where.line,
             where.column);
    }
    std::vector<std::string> from_file;
    for (const auto& [k, v] : table) {
        std::string key(k.str());
        std::string flag = "--" + key;
        std::replace(flag.begin(), flag.end(), '_', '-');
        WEFT_CHECK(key != "config", "config file {}: a config file cannot name another", file);
        CLI::Option* opt = sub->get_option_no_throw(flag);
        WEFT_CHECK(opt != nullptr, "config file {}: unknown key '{}' (no flag {} for 'weft {}')",
                   file, key, flag, sub->get_name());
        std::string text = value_text(v, file, key);
        if (opt->get_type_size() == 0) {  // a flag: present when true
            if (text == "true")
                from_file.push_back(flag);
            else
                WEFT_CHECK(text == "false",
                           "config file {}: key '{}' must be true or false, got {}", file, key,
                           text);
        } else {
            from_file.push_back(flag + "=" + text);
        }
    }
    args.insert(args.begin() + 1, from_file.begin(), from_file.end());
    return args;
}

}  // namespace weft::cli
