#pragma once
// One error type for every bad input and failed invariant: the CLI catches it at the top, prints
// its message once and exits non-zero. Messages name the bad value, what was expected and where
// it came from.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace weft {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace weft

// Checks an input or invariant; on failure throws weft::Error with the formatted message.
#define WEFT_CHECK(cond, ...)                   \
    do {                                        \
        if (!(cond)) ::weft::fail(__VA_ARGS__); \
    } while (0)
