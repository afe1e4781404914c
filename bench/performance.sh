#!/usr/bin/env bash
# Regenerates the figures of docs/performance.md on this machine (run it on an otherwise idle
# machine: the two cores are the whole machine). Usage: bash bench/performance.sh [build dir]
# The mixed-precision and scaling tables are bench/scaling.sh's; the tensor- and pipeline-parallel
# ones come from bench/tensor_parallel.sh and bench/pipeline_bubble.sh, and the MoE one from
# bench/moe.sh, which it runs at the end.
set -euo pipefail
W=${1:-build}/weft
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "== machine"; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-120
echo "== fp32 GEMM peak, 2 threads"
OMP_NUM_THREADS=2 "$W" bench peak --size 4096 --seconds 5 --json | tee /tmp/weft-peak.json
peak=$(sed -E 's/.*"fp32_gflops": ([0-9.]+).*/\1/' /tmp/weft-peak.json)
echo "== gpt2 124M training step, B=4, T=1024, one process, 2 threads"
OMP_NUM_THREADS=2 "$W" bench train --preset gpt2 --batch-size 4 --seq-len 1024 --steps 3 --peak-gflops "$peak"
echo "== the same with bf16 matrix products, and the per-kernel profile of both"
bpeak=$(OMP_NUM_THREADS=2 "$W" bench peak --dtype bf16 --size 1024 --seconds 5 --json | sed -E 's/.*"bf16_gflops": ([0-9.]+).*/\1/')
for dtype in fp32 bf16; do
  p=$peak
  [ $dtype = bf16 ] && p=$bpeak
  OMP_NUM_THREADS=2 "$W" bench train --preset gpt2 --batch-size 4 --seq-len 1024 --steps 3 \
    --dtype $dtype --profile --peak-gflops "$p"
done
echo "== the same, two data-parallel ranks with one thread each"
mpirun -np 2 --bind-to none "$W" bench train --preset gpt2 --batch-size 4 --seq-len 1024 --steps 3
echo "== tensor parallel: tp 2 (one thread per rank), with and without sequence parallelism"
bash "$(dirname "$0")/tensor_parallel.sh" "${1:-build}"
echo "== pipeline parallel: measured against simulated bubble, pp 2, 8 micro-batches"
bash "$(dirname "$0")/pipeline_bubble.sh" "${1:-build}" 2 8
echo "== mixture of experts: tiny Mixtral at ep 1 and ep 2 against a dense Llama (np 2)"
bash "$(dirname "$0")/moe.sh" "${1:-build}" 20
