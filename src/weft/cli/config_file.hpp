#pragma once
// `--config FILE.toml`: each top-level key becomes the flag of the same name (underscores read as
// dashes), placed before the command line's own flags so that the command line wins.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace weft::cli {

// argv with the config file of the chosen subcommand expanded in place. Unknown keys, nested
// tables and unreadable files are errors naming the file and the key.
std::vector<std::string> expand_config(int argc, char** argv, CLI::App& app);

}  // namespace weft::cli
