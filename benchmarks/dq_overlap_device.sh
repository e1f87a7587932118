#!/bin/bash
# dq_convert under the dK/dV kernel's last wave (sm90_bwd.DQ_OVERLAP) on the device: the GPU tests of the backward and
# of packed batches (OV_TESTS; SKIP_TESTS=1 skips them), then an A/B against dq_convert after the whole grid, timed
# alternately in one process by CUDA events around 10 calls queued back to back (bwd_interleaved.py --timer events: a
# kernel sum would count the overlapped convert's wait, and one call's span under the profiler its host's gaps;
# OV_TIMER replaces the timer, OV_KINDS the kinds, fa4 among them when .fa4whl is carried).
#   bash benchmarks/dq_overlap_device.sh [tag]     (writes $OUT/<tag>/)
. benchmarks/device_env.sh
kinds=${OV_KINDS:-attngen:sm90_bwd.DQ_OVERLAP=False,attngen}
[[ "$kinds" == *fa4* ]] && { fa4_peer || exit 1; }
dir=$OUT/${1:-dq_overlap}
mkdir -p "$dir"
SECONDS=0
if [ -z "$SKIP_TESTS" ]; then
  timeout "${OV_TEST_LIMIT:-240}" python3 -m pytest -v -m gpu -p no:cacheprovider --durations=10 \
    ${OV_TESTS:-tests/test_gpu_varlen.py tests/test_gpu_backward.py} > "$dir/tests.txt" 2>&1
  echo "tests rc $? after ${SECONDS}s" | tee -a "$dir/tests.txt"
  grep -c PASSED "$dir/tests.txt"; grep -E "FAILED|ERROR" "$dir/tests.txt" | head; tail -2 "$dir/tests.txt"
fi
[ -n "$SKIP_AB" ] && exit 0
timeout "${OV_AB_LIMIT:-330}" python3 benchmarks/bwd_interleaved.py --timer "${OV_TIMER:-events}" --head-dims "${OV_HEAD_DIMS:-64,128}" \
  --seqlens "${OV_SEQLENS:-2048,8192,16384}" --reps "${OV_REPS:-6}" --kinds "$kinds" > "$dir/ab.txt" 2>&1
echo "a/b rc $? after ${SECONDS}s"
grep "speed\|: backward [0-9a-f]" "$dir/ab.txt"
