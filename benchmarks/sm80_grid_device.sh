#!/bin/bash
# The mma.sync backward's grid partition on the device. MODE=sweep (default): its GPU tests beside the atomic plan's,
# then the sweep of the planner's atomic-free and atomic plans and the grid's 8-warp tilings against
# FlashAttention-2 (SDPA's flash backend), 8k. MODE=default (the planner takes the grid): the backward GPU tests, the
# variants' and packed batches' through the multistage pipeline, then the sweep of the planner's plans.
# Env HEAD_DIMS (default 64,128,256).
source benchmarks/device_env.sh
if [ "${MODE:-sweep}" = default ]; then
  gpu_tests 150 "$OUT/tests_backward.txt" tests/test_gpu_backward.py
  gpu_tests 300 "$OUT/tests_multistage.txt" tests/test_gpu_variants.py tests/test_gpu_varlen.py -k multistage
  timeout 300 python3 benchmarks/sweep_bwd.py --atomic --limit 2 --head-dims "${HEAD_DIMS:-64,128,256}" \
    --out "$OUT/sweep_default.json" > "$OUT/sweep_default.txt" 2>&1
  echo "sweep rc $? after ${SECONDS}s" >> "$OUT/sweep_default.txt"
  cat "$OUT/sweep_default.txt"
  exit 0
fi
gpu_tests 240 "$OUT/tests_grid.txt" tests/test_gpu_backward.py -k "grid_partition or atomic_dq" -s
grep -c "bwd grid" "$OUT/tests_grid.txt"
timeout 400 python3 benchmarks/sweep_bwd.py --atomic --grid --limit 1 --head-dims "${HEAD_DIMS:-64,128,256}" \
  --out "$OUT/sweep_grid.json" > "$OUT/sweep_grid.txt" 2>&1
echo "sweep rc $? after ${SECONDS}s" >> "$OUT/sweep_grid.txt"
cat "$OUT/sweep_grid.txt"
