#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what is needed, builds, tokenises the
# bundled corpus, trains the default small model for a few minutes (progress line with loss,
# tokens/s and ETA), then samples text from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# A unity build (each folder's files compiled together) takes about half the CPU time of a plain
# one; the main job needs only the weft command, not the tests and benchmarks.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build build -j "$(nproc)" --target weft
build/weft prepare --input data/tinyshakespeare.txt --out data
rm -rf runs/main
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe --bind-to none build/weft train --config configs/shakespeare.toml --out runs/main
build/weft sample --ckpt runs/main --prompt "ROMEO:" --tokens 200 --top-k 40
