#!/bin/bash
# The mma.sync family's backward tilings on the H200 (carry .whl): benchmarks/sweep_bwd.py --atomic --grid at hd64 and
# hd256 (the points below FlashAttention-2 in mma_sync_1), every atomic-dQ and grid-partition tiling that compiles
# without spills beside the planner's, FA2 (SDPA's flash backend) in the same process. Writes $OUT/gpu.txt, bwd.json,
# bwd.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
timeout "${LIMIT_S:-400}" python3 benchmarks/sweep_bwd.py --atomic --grid --limit "${LIMIT:-4}" \
  --head-dims "${HEAD_DIMS:-64,256}" --seqlen 8192 --out "$OUT/bwd.json" > "$OUT/bwd.txt" 2>&1
echo "sweep rc $? after ${SECONDS}s"
grep -v "^ *$" "$OUT/bwd.txt" | tail -60
