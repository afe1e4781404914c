#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is needed, builds, runs the
# unit tests under the address and undefined-behaviour sanitizers, then every other test (MPI
# multi-rank, command line, lint, accuracy, and the kernels' unit tests again) in the release
# build. The last line is ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Unity builds (each folder's files compiled as one) take about half the CPU time of a plain
# build; the plain build is what a developer's incremental build uses, and both compile.
# The sanitizer build keeps line tables only (-g1): enough for the sanitizers' reports, 10% less
# to compile than full debug information. It links ~100 unit-test executables, each with the
# instrumented libraries: LLVM's linker takes about half of GNU ld's CPU time on them
# (test_serve_engine 1.6 CPU-s against 2.9, test_plan_moe 1.1 against 1.6).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DWEFT_SANITIZE=ON -DCMAKE_UNITY_BUILD=ON -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld >/dev/null
cmake --build build-asan --target unit_tests -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L unit --output-on-failure -j "$jobs")

# The release build runs the rest: multi-rank, command-line, lint, accuracy and the kernels' unit
# tests (the others ran above, under the sanitizers).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON \
  -DWEFT_RELEASE_SUITE=ON >/dev/null
cmake --build build -j "$jobs"
# Two at a time, except the multi-rank tests, which fill both cores each and so run alone
# (RUN_SERIAL, tests/CMakeLists.txt).
cd build && ctest --output-on-failure -j "$jobs"
