#!/bin/bash
# The mma.sync backward, this tree against main (ab_main/: `git archive main attngen templates | tar -x -C ab_main`):
# the grid and atomic GPU tests, then benchmarks/sweep_bwd.py --atomic --limit 1 (the planner's atomic-free and
# atomic plans beside FlashAttention-2, 8k) for each, alternating, two rounds. Env HEAD_DIMS (default 64,128).
source benchmarks/device_env.sh
gpu_tests 200 "$OUT/tests_grid.txt" tests/test_gpu_backward.py -k "grid_partition or atomic_dq"
for round in 1 2; do
  for side in main new; do
    if [ $side = main ]; then
      PYTHONPATH=$PWD/ab_main:$PYTHONPATH ATTNGEN_TEMPLATES=$PWD/ab_main/templates ATTNGEN_CACHE_DIR=/tmp/cache-main \
        timeout 200 python3 benchmarks/sweep_bwd.py --atomic --limit 1 --head-dims "${HEAD_DIMS:-64,128}" \
        --out "$OUT/sweep_${side}_$round.json" > "$OUT/sweep_${side}_$round.txt" 2>&1
    else
      timeout 200 python3 benchmarks/sweep_bwd.py --atomic --limit 1 --head-dims "${HEAD_DIMS:-64,128}" \
        --out "$OUT/sweep_${side}_$round.json" > "$OUT/sweep_${side}_$round.txt" 2>&1
    fi
    echo "$side $round rc $? after ${SECONDS}s"
  done
done
grep -h "atomic" "$OUT"/sweep_*_*.txt | head -40
