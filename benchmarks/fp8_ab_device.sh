#!/bin/bash
# The softmax's partial chains against main (ab_main/, from `git archive main attngen templates`): bf16 forward
# TFLOP/s of each tree in its own process, ROUNDS rounds, then this tree's fp8 bench (writes $OUT/fp8_ab/).
. benchmarks/device_env.sh
dir=$OUT/fp8_ab
mkdir -p "$dir"
for round in $(seq "${ROUNDS:-2}"); do
  PYTHONPATH=/tmp/site:$PWD/ab_main python3 benchmarks/time_bwd.py --forward --head-dims 64,128,256 --tag main
  python3 benchmarks/time_bwd.py --forward --head-dims 64,128,256 --tag chains
done 2>&1 | tee "$dir/ab.txt"
python3 benchmarks/fp8_forward.py --json "$dir/fp8_bench.json" 2>&1 | tee "$dir/fp8_bench.txt"
