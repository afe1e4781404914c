#include "weft/cli/output_paths.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "weft/core/error.hpp"

namespace weft::cli {

namespace fs = std::filesystem;

namespace {

// Permission bits say little to root or on a read-only mount: creating a file is the test.
void probe_directory(const fs::path& dir, const OutputPath& o) {
    std::string probe = (dir / ".weft-write-check-XXXXXX").string();
    const int fd = ::mkstemp(probe.data());
    WEFT_CHECK(fd >= 0, "{} {}: cannot write in {}: {}", o.flag, o.path.string(), dir.string(),
               std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
}

void check_file(const OutputPath& o) {
    std::error_code ec;
    const fs::path& p = o.path;
    if (fs::exists(p, ec)) {
        WEFT_CHECK(!fs::is_directory(p, ec), "{} {}: is a directory, expected a file to write",
                   o.flag, p.string());
        // Opened without truncating: the file is only replaced once the command writes it.
        const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
        WEFT_CHECK(fd >= 0, "{} {}: cannot write the file: {}", o.flag, p.string(),
                   std::strerror(errno));
        ::close(fd);
        return;
    }
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    WEFT_CHECK(fs::is_directory(dir, ec), "{} {}: its directory {} does not exist", o.flag,
               p.string(), dir.string());
    probe_directory(dir, o);
}

void check_directory(const OutputPath& o) {
    std::error_code ec;
    fs::path existing = o.path;
    while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
    if (existing.empty()) existing = ".";
    WEFT_CHECK(fs::is_directory(existing, ec), "{} {}: {} is not a directory", o.flag,
               o.path.string(), existing.string());
    probe_directory(existing, o);
}

}  // namespace

void check_output_paths(std::initializer_list<OutputPath> outputs) {
    for (const OutputPath& o : outputs) {
        if (o.path.empty()) continue;
        if (o.directory)
            check_directory(o);
        else
            check_file(o);
    }
}

}  // namespace weft::cli
