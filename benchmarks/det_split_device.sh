#!/bin/bash
# The deterministic hd192/256 backward on the wgmma split (each consumer warpgroup waits for a query tile's turn
# before its v4 dQ reductions), measured on the device machine from a checkout of next/det-split (~8 minutes):
#   bash benchmarks/det_split_device.sh        (writes $OUT/det_split/)
# 1. The GPU tests of the backward (bitwise equality over three runs at hd256 none, hd192 causal and a hd256 window
#    among them; accuracy of every deterministic head dim) and the varlen ones; a hang shows as the timeout.
# 2. The backward bench with cuDNN at hd192/256, 2k/8k/16k: its "deterministic / default" column is the figure the
#    issue names (target 0.8; the mma.sync kernels read 0.40-0.47 in results/h100/peers_2).
. benchmarks/device_env.sh
dir=$OUT/det_split
mkdir -p "$dir"
SECONDS=0
gpu_tests 300 "$dir/tests.txt" tests/test_gpu_backward.py tests/test_gpu_varlen.py
python3 -m attngen bench --backward --head-dims 192,256 --seqlens 2k,8k,16k --peers cudnn --budget-s 200 \
  --out "$dir/bench" > "$dir/bench.txt" 2>&1
echo "bench rc $? after ${SECONDS}s"
grep "^| " "$dir/bench/bwd.md" | head -16 | cut -d'|' -f2-11
rm -f "$dir"/bench/*.png
