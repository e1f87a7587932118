#!/bin/bash
# The mma.sync backward's grid partition on the device: its GPU tests beside the atomic plan's, then the sweep of
# the planner's atomic-free and atomic plans and the grid's 8-warp tilings against FlashAttention-2 (SDPA's flash
# backend), 8k. Env HEAD_DIMS (default 64,128,256).
source benchmarks/device_env.sh
gpu_tests 240 "$OUT/tests_grid.txt" tests/test_gpu_backward.py -k "grid_partition or atomic_dq" -s
grep -c "bwd grid" "$OUT/tests_grid.txt"
timeout 400 python3 benchmarks/sweep_bwd.py --atomic --grid --limit 1 --head-dims "${HEAD_DIMS:-64,128,256}" \
  --out "$OUT/sweep_grid.json" > "$OUT/sweep_grid.txt" 2>&1
echo "sweep rc $? after ${SECONDS}s" >> "$OUT/sweep_grid.txt"
cat "$OUT/sweep_grid.txt"
