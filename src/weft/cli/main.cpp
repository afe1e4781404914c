#include "weft/cli/main.hpp"

#include <cstdio>

namespace weft::cli {
int main(int, char**) {
    std::puts("weft: under construction");
    return 0;
}
}  // namespace weft::cli
