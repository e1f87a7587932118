#!/bin/bash
# The sm90 fp8 forward on the device machine: its GPU tests, then benchmarks/fp8_forward.py (fp8 against attngen's
# bf16 forward, V's transpose timed alone, FA3's RMSE report), ROUNDS rounds in separate processes.
#   [FP8_TESTS=0] [ROUNDS=2] bash benchmarks/fp8_device.sh          (writes $OUT/fp8/)
. benchmarks/device_env.sh
dir=$OUT/fp8
mkdir -p "$dir"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$dir/gpu.txt" 2>&1
if [ "${FP8_TESTS:-1}" != 0 ]; then
  gpu_tests 300 "$dir/tests_fp8.txt" tests/test_gpu_fp8.py ${FP8_TEST_ARGS:-}
fi
for round in $(seq "${ROUNDS:-2}"); do
  python3 benchmarks/fp8_forward.py --json "$dir/bench_$round.json" ${FP8_BENCH_ARGS:-} 2>&1 | tee "$dir/bench_$round.txt"
done
