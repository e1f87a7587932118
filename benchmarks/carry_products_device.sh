#!/bin/bash
# hd192's carried products (sm90_bwd_halves.CARRY_PRODUCTS_MASKED / _UNMASKED) on the device: the GPU tests that run
# hd192's backward (CP_TESTS; SKIP_TESTS=1 skips them), then the planner's choice against steps that wait for their
# products, timed alternately in one process (bwd_interleaved.py), default and deterministic plans, FA4 in the run
# when .fa4whl is carried.
#   bash benchmarks/carry_products_device.sh [tag]     (writes $OUT/<tag>/)
. benchmarks/device_env.sh
dir=$OUT/${1:-carry}
mkdir -p "$dir"
kinds="attngen:sm90_bwd_halves.CARRY_PRODUCTS_MASKED=False,attngen"
if ls .fa4whl/*.whl >/dev/null 2>&1; then fa4_peer && kinds="$kinds,fa4"; fi
SECONDS=0
if [ -z "$SKIP_TESTS" ]; then
  timeout "${CP_TEST_LIMIT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=10 \
    ${CP_TESTS:-tests/test_gpu_backward.py tests/test_gpu_varlen.py} > "$dir/tests.txt" 2>&1
  echo "tests rc $? after ${SECONDS}s" | tee -a "$dir/tests.txt"
  grep -E "FAILED|ERROR" "$dir/tests.txt" | head; tail -3 "$dir/tests.txt"
fi
for det in "" "--deterministic"; do
  timeout "${CP_AB_LIMIT:-200}" python3 benchmarks/bwd_interleaved.py --head-dims 192 --seqlens "${CP_SEQLENS:-2048,8192,16384}" \
    --reps "${CP_REPS:-6}" --kinds "$kinds" $det > "$dir/ab${det:+_deterministic}.txt" 2>&1
  echo "a/b ${det:-default} rc $? after ${SECONDS}s"
  grep "speed" "$dir/ab${det:+_deterministic}.txt"
done
