#!/bin/bash
# The deterministic sm90 backward, this tree against main (ab_main/: `git archive main attngen templates | tar -x -C
# ab_main`), on the device machine (~6 minutes): the deterministic GPU tests (bitwise equality over three runs,
# accuracy; dense and packed), then benchmarks/time_bwd.py --deterministic for each tree, alternating, each in its
# own process, beside the default plans of this tree; ROUNDS rounds. Env HEAD_DIMS (192,256), SEQLENS (2048,8192).
#   bash benchmarks/det_ab_device.sh        (writes $OUT/det_ab/)
. benchmarks/device_env.sh
dir=$OUT/det_ab
mkdir -p "$dir"
SECONDS=0
gpu_tests 300 "$dir/tests.txt" tests/test_gpu_backward.py tests/test_gpu_compat.py -k "determin or varlen_gradients"
grep -q "passed" "$dir/tests.txt" && ! grep -q "failed\|error" "$dir/tests.txt" || { echo "tests did not pass"; exit 1; }
hd=${HEAD_DIMS:-192,256}
sl=${SEQLENS:-2048,8192}
TIMES=$dir/times.txt
for round in $(seq "${ROUNDS:-2}"); do
  time_in "" 150 --tag "default r$round" --head-dims "$hd" --seqlens "$sl"
  time_in "$PWD/ab_main" 150 --deterministic --tag "main r$round" --head-dims "$hd" --seqlens "$sl"
  time_in "" 150 --deterministic --tag "new r$round" --head-dims "$hd" --seqlens "$sl"
  echo "round $round after ${SECONDS}s"
done
sort -t' ' -k3,5 "$dir/times.txt" | grep TFLOP
