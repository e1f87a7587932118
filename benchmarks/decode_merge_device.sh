#!/bin/bash
# The split kernel's own merge on the device: its cost against the combine kernel (decode_combine_cost.py) and
# the GPU decode tests. Results under $OUT/merge (tarred: a call brings back few files).
source benchmarks/device_env.sh
mkdir -p "$OUT/merge"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/merge/gpu.txt"
python3 benchmarks/decode_combine_cost.py ${SHAPES:+--shapes $SHAPES} 2>&1 | tee "$OUT/merge/combine_cost.txt"
if [ -z "$SKIP_TESTS" ]; then
  gpu_tests 400 "$OUT/merge/tests_decode.txt" tests/test_gpu_decode.py
fi
tar -C "$OUT" -czf "$OUT/merge.tgz" merge
