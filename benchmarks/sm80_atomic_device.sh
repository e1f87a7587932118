#!/bin/bash
# The mma.sync backward's atomic dQ (group-ordered accumulator, padded row values, dq_convert) on the device machine:
# the backward GPU tests, then every atomic and atomic-free plan the sweep finds beside FlashAttention-2 (torch's SDPA
# flash backend), 8k, hd64/128/256, causal and not.   bash benchmarks/sm80_atomic_device.sh [tag]
. benchmarks/device_env.sh
dir=$OUT/sm80_atomic_${1:-1}
mkdir -p "$dir"
if [ -z "$SKIP_TESTS" ]; then
  gpu_tests 300 "$dir/tests_backward.txt" tests/test_gpu_backward.py
fi
python3 benchmarks/sweep_bwd.py --head-dims ${SWEEP_HEAD_DIMS:-64,128,256} --seqlen 8192 --atomic --limit ${SWEEP_LIMIT:-3} \
  --out "$dir/sweep_atomic.json" > "$dir/sweep_atomic.txt" 2>&1
tail -50 "$dir/sweep_atomic.txt"
