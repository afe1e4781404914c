#pragma once
// Every path a command will write, checked before it starts work: a run that trains for hours
// must not fail at its end, without its last checkpoint, because --trace names a directory that
// does not exist.
#include <filesystem>
#include <initializer_list>

namespace weft::cli {

struct OutputPath {
    std::filesystem::path path;  // empty: the command writes nothing there
    const char* flag;
    bool directory;  // a directory the command creates (with its parents) and fills; else a file
};

// An error naming the flag, the path and why it cannot be written. A file's directory must exist
// and take a new file (or the file be writable); a directory's nearest existing ancestor must be
// a directory that takes a new file. Nothing is left behind: the probe files are removed.
void check_output_paths(std::initializer_list<OutputPath> outputs);

}  // namespace weft::cli
