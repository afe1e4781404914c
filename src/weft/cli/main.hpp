#pragma once

namespace weft::cli {
// The `weft` command: parses the subcommand and its flags, runs it, and turns every weft::Error
// into one line on stderr and a non-zero exit.
int main(int argc, char** argv);
}  // namespace weft::cli
