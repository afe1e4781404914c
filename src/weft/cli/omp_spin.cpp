#include "weft/cli/omp_spin.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace weft::cli {

void short_omp_spin(int argc, char** argv) {
    if (argc < 2) return;
    const std::string_view command = argv[1];
    if (command != "serve" && command != "sample") return;
    if (std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_WAIT_POLICY")) return;
    // Set before the exec: the second run finds it and goes on.
    if (setenv("GOMP_SPINCOUNT", "1000", 1) != 0) return;
    execv("/proc/self/exe", argv);
}

}  // namespace weft::cli
