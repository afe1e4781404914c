#pragma once
// Checks on flags' values that CLI11 runs as it parses them (from the command line or --config),
// so that a bad value is refused before the command starts, by one message naming the flag.
#include <initializer_list>

namespace CLI {
class App;
}

namespace weft::cli {

// Every floating-point flag of `app` and its subcommands refuses inf and nan: they pass any
// sign or range check (`--lr inf` > 0) and only show up as a diverged run.
void require_finite_floats(CLI::App& app);

// The named integer flags of c stand for "not given" by 0 (the preset's, the cluster's, the
// search's choice): an explicit value must be at least 1, so that `--n-head 0` is refused like
// `--n-head -1` instead of silently meaning "not given". A flag missing from c is an internal
// error.
void require_counts(CLI::App* c, std::initializer_list<const char*> flags);

// Flags that mean something only together (--offload and --offload-dir): each given without the
// other is refused, naming both. A flag missing from c is an internal error.
void require_together(CLI::App* c, const char* a, const char* b);

}  // namespace weft::cli
