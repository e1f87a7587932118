#!/bin/bash
# One device call per tier for a tree with several unmeasured changes (first used for the softmax traits and the
# early row values: results/h100/softmax_rows_1), with main's code in ab_main/
# (rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main):
#   bash benchmarks/combo_device.sh time    the forward's softmax traits ablated (softmax_device.sh, no tests), the
#                                           backward's early row values against main, ncu of the hd256 backward
#   bash benchmarks/combo_device.sh tests   the GPU tiers these changes touch; the mma.sync atomic-dQ sweep
. benchmarks/device_env.sh
dir=$OUT/combo
mkdir -p "$dir"
if [ "$1" = time ]; then
  SOFTMAX_TESTS=0 ROUNDS=2 timeout 330 bash benchmarks/softmax_device.sh
  for round in 1 2; do
    PYTHONPATH=/tmp/site:$PWD/ab_main timeout 60 python3 benchmarks/time_bwd.py --tag main --head-dims 64,128,256 --seqlens 8192
    timeout 60 python3 benchmarks/time_bwd.py --tag early --head-dims 64,128,256 --seqlens 8192
  done 2>&1 | tee "$dir/ab_rows_early.txt"
  NCU_BWD_CONFIGS="256 " timeout 120 bash benchmarks/ncu_bwd.sh hd256
else
  timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_forward.py tests/test_gpu_variants.py \
    tests/test_gpu_backward.py > "$dir/tests.txt" 2>&1
  tail -3 "$dir/tests.txt"
  timeout 200 python3 benchmarks/sweep_bwd.py --head-dims 64,128 --seqlen 8192 --atomic --limit 6 \
    --out "$dir/sweep_atomic.json" 2>&1 | tee "$dir/sweep_atomic.txt"
fi
