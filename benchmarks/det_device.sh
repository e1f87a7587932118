#!/bin/bash
# The deterministic sm90 backward (dQ's TMA reductions ordered by a semaphore per query tile), measured (device
# machine), from a checkout of branch next/bwd-det (stacked on next/bwd-split-d):
#   bash benchmarks/det_device.sh        (writes $OUT/det/)
# The GPU tests of the deterministic paths first (bitwise reproducibility, accuracy, the flash_attn shim's
# deterministic flag, packed sequences); then the backward bench with cuDNN, whose "deterministic / default" column
# is the figure the issue names (target 0.8).
. benchmarks/device_env.sh
dir=$OUT/det
mkdir -p "$dir"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_backward.py tests/test_gpu_compat.py \
  tests/test_gpu_varlen.py -k "determin or catalogue" > "$dir/tests.txt" 2>&1
status=$?
tail -3 "$dir/tests.txt"
[ $status -eq 0 ] || exit 1
python3 -m attngen bench --backward --head-dims 64,128 --seqlens 2k,8k --peers cudnn --out "$dir/bench" \
  > "$dir/bench.txt" 2>&1
tail -20 "$dir/bench.txt"
