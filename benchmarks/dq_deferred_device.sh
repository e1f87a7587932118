#!/bin/bash
# The sm90 backward's deferred dQ (sm90_bwd_rows.DQ_DEFERRED_BLOCK_M, DQ_STAGGER_BLOCK_M) on the device: the GPU tests
# (DD_TESTS, verbose, each test's time; SKIP_TESTS=1 skips them), then an A/B of the planner's choice against main's
# order (DQ_DEFERRED_BLOCK_M empty) timed alternately in one process (bwd_interleaved.py; DD_KINDS replaces the
# kinds, fa4 among them when .fa4whl is carried; DD_DETERMINISTIC=1 times attngen's deterministic plans; DD_TIMER is
# bwd_interleaved.py's --timer). Other A/Bs of the same shape set its defaults (dq_overlap_device.sh).
#   bash benchmarks/dq_deferred_device.sh [tag]     (writes $OUT/<tag>/)
. benchmarks/device_env.sh
[[ "${DD_KINDS}" == *fa4* ]] && { fa4_peer || exit 1; }
dir=$OUT/${1:-dq_deferred}
mkdir -p "$dir"
SECONDS=0
if [ -z "$SKIP_TESTS" ]; then
  timeout "${DD_TEST_LIMIT:-300}" python3 -m pytest -v -m gpu -p no:cacheprovider --durations=20 \
    ${DD_TESTS:-tests/test_gpu_backward.py tests/test_gpu_varlen.py} > "$dir/tests.txt" 2>&1
  echo "tests rc $? after ${SECONDS}s" | tee -a "$dir/tests.txt"
  grep -c PASSED "$dir/tests.txt"; grep -E "FAILED|ERROR" "$dir/tests.txt" | head; tail -2 "$dir/tests.txt"
fi
[ -n "$SKIP_AB" ] && exit 0
timeout "${DD_AB_LIMIT:-300}" python3 benchmarks/bwd_interleaved.py --head-dims "${DD_HEAD_DIMS:-64,128}" \
  --seqlens "${DD_SEQLENS:-2048,8192,16384}" --reps "${DD_REPS:-6}" \
  --kinds "${DD_KINDS:-attngen:sm90_bwd_rows.DQ_DEFERRED_BLOCK_M=[],attngen}" ${DD_DETERMINISTIC:+--deterministic} \
  --timer "${DD_TIMER:-sum}" \
  > "$dir/ab.txt" 2>&1
echo "a/b rc $? after ${SECONDS}s"
grep "speed\|: backward [0-9a-f]" "$dir/ab.txt"
