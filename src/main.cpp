#include "weft/cli/main.hpp"

int main(int argc, char** argv) {
    return weft::cli::main(argc, argv);
}
