#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is needed, builds, runs the
# unit tests under the address and undefined-behaviour sanitizers, then every test (unit, MPI
# multi-rank, command line) in the release build. The last line is ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWEFT_SANITIZE=ON >/dev/null
cmake --build build-asan --target unit_tests -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L unit --output-on-failure -j "$jobs")

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
cd build && ctest --output-on-failure
