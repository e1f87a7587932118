#!/bin/bash
# hd256's split with dV issued early (sm90_bwd_split.DV_EARLY) on the device: the GPU tests that run it (-k TESTS_K),
# then the planner's plan against DV_EARLY off, cuDNN and FA4, alternated in one process by CUDA events.
# REPS (4). Carry .whl and .fa4whl (move generated/ and benchmarks/results/ out: 64 MiB). Writes $OUT/tests.txt, ab.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_tests "${TEST_LIMIT:-200}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "${TESTS_K:-dv_issued_early or 256}"
timeout 240 python3 benchmarks/bwd_interleaved.py --timer events --head-dims 256 --seqlens 2048,8192,16384 \
  --reps "${REPS:-4}" --kinds "attngen:sm90_bwd_split.DV_EARLY=False,attngen,cudnn,fa4" > "$OUT/ab.txt" 2>&1
echo "a/b rc $? after ${SECONDS}s"
grep speed "$OUT/ab.txt"
