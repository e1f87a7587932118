#!/bin/bash
# Kernel times, attngen's and FlashAttention-4's, over seqlens 1k-16k (device machine, ~90 s): the forward at hd64 and
# hd128, the backward at hd128, one round each (benchmarks/bwd_kernel_times.py), for fitting a block's fixed cost
# against its per-step cost. .whl and .fa4whl carried (move generated/ and benchmarks/results/ out of the working tree
# for the call: 64 MiB travel at most).
#   bash benchmarks/block_cost_device.sh      (writes $OUT/block_cost/kernel_times_{fwd,bwd}.txt)
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/block_cost
mkdir -p "$dir"
SECONDS=0
seqlens=1024,2048,4096,8192,16384
timeout 250 python3 benchmarks/bwd_kernel_times.py --forward --head-dims 64,128 --seqlens $seqlens --rounds 1 \
  > "$dir/kernel_times_fwd.txt" 2>&1
echo "forward after ${SECONDS}s"
timeout 250 python3 benchmarks/bwd_kernel_times.py --head-dims 128 --seqlens $seqlens --rounds 1 \
  > "$dir/kernel_times_bwd.txt" 2>&1
echo "backward after ${SECONDS}s"
grep -v "^    " "$dir/kernel_times_fwd.txt" "$dir/kernel_times_bwd.txt"
