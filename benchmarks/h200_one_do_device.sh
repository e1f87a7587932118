#!/bin/bash
# hd192 with one dO stage and both warpgroups' dQ staged (sm90_bwd_halves.DO_ONE_STAGE) on the device: the GPU tests
# that run hd192's backward (-k TESTS_K), then the planner's plan against DO_ONE_STAGE off and FA4, alternated in one
# process by CUDA events. REPS (5). Carry .whl and .fa4whl. Writes $OUT/tests.txt, ab.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_tests "${TEST_LIMIT:-200}" "$OUT/tests.txt" tests/test_gpu_backward.py \
  -k "${TESTS_K:-one_do or dv_issued or carried or 192}"
timeout 200 python3 benchmarks/bwd_interleaved.py --timer events --head-dims 192 --seqlens 2048,8192,16384 \
  --reps "${REPS:-5}" --kinds "attngen:sm90_bwd_halves.DO_ONE_STAGE=False,attngen,fa4" > "$OUT/ab.txt" 2>&1
echo "a/b rc $? after ${SECONDS}s"
grep speed "$OUT/ab.txt"
