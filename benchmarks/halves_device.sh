#!/bin/bash
# hd192's backward with the KV rows halved between the warpgroups (families/sm90_bwd_halves.py) against another tree
# (BASE, default ab_main/: `git archive main attngen templates | tar -x -C ab_main`), on the device machine: the GPU
# tests that run hd192's backward (dense, windows with GQA, variants, packed, deterministic), then
# benchmarks/time_bwd.py for each tree, alternating, each in its own process, default and (unless DET=0)
# deterministic; ROUNDS rounds. Env SEQLENS (2048,8192,16384), SKIP_TESTS=1.
#   bash benchmarks/halves_device.sh        (writes $OUT/halves/)
. benchmarks/device_env.sh
dir=$OUT/halves
mkdir -p "$dir"
SECONDS=0
if [ -z "$SKIP_TESTS" ]; then
  gpu_tests 420 "$dir/tests.txt" tests/test_gpu_backward.py tests/test_gpu_variants.py tests/test_gpu_varlen.py \
    tests/test_gpu_compat.py -k "192 or varlen_gradients"
  grep -q "passed" "$dir/tests.txt" && ! grep -q "failed\|error" "$dir/tests.txt" || { echo "tests did not pass"; exit 1; }
fi
sl=${SEQLENS:-2048,8192,16384}
base=${BASE:-ab_main}
TIMES=$dir/times.txt
for round in $(seq "${ROUNDS:-2}"); do
  time_in "$PWD/$base" 150 --tag "base r$round" --head-dims 192 --seqlens "$sl"
  time_in "" 150 --tag "new r$round" --head-dims 192 --seqlens "$sl"
  [ "${DET:-1}" = 0 ] && continue
  time_in "$PWD/$base" 150 --deterministic --tag "base-det r$round" --head-dims 192 --seqlens "$sl"
  time_in "" 150 --deterministic --tag "new-det r$round" --head-dims 192 --seqlens "$sl"
  echo "round $round after ${SECONDS}s"
done
sort -t' ' -k3,5 "$dir/times.txt" | grep TFLOP
