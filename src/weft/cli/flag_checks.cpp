#include "weft/cli/flag_checks.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

#include "weft/core/error.hpp"

namespace weft::cli {

namespace {
// A value that does not parse as a number is left to CLI11's own conversion error.
const CLI::Validator kFinite(
    [](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0' || std::isfinite(x)) return {};
        return fmt::format("{} is not a finite number; expected a real number", v);
    },
    "");

const CLI::Validator kCount(
    [](std::string& v) -> std::string {
        char* end = nullptr;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (end == v.c_str() || *end != '\0' || x >= 1) return {};
        return fmt::format(
            "{} is not allowed; expected at least 1 (leave the flag out for the "
            "default)",
            v);
    },
    "");
}  // namespace

void require_finite_floats(CLI::App& app) {
    for (CLI::Option* o : app.get_options())
        if (o->get_type_name().starts_with("FLOAT")) o->check(kFinite);
    for (CLI::App* s : app.get_subcommands({})) require_finite_floats(*s);
}

void require_counts(CLI::App* c, std::initializer_list<const char*> flags) {
    for (const char* f : flags) {
        CLI::Option* o = c->get_option_no_throw(f);
        WEFT_CHECK(o, "internal: {} has no flag {} to require a count of", c->get_name(), f);
        o->check(kCount);
    }
}

void require_together(CLI::App* c, const char* a, const char* b) {
    CLI::Option* oa = c->get_option_no_throw(a);
    CLI::Option* ob = c->get_option_no_throw(b);
    WEFT_CHECK(oa && ob, "internal: {} lacks {} or {} to require together", c->get_name(), a, b);
    oa->needs(ob);
    ob->needs(oa);
}

}  // namespace weft::cli
