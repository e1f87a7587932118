#!/bin/bash
# hd128's 80-query steps (sm90_bwd_rows.BLOCK_M_UNMASKED = {128: 80}, FlashAttention-4's tile; kept off since the H100's
# q80 runs) on the device today: their GPU test, then unmasked hd128 at 2k/8k/16k against the default and FA4,
# alternated in one process by CUDA events. REPS (4). Carry .whl and .fa4whl (move generated/ and benchmarks/results/
# out). Writes $OUT/tests.txt, ab.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_tests "${TEST_LIMIT:-120}" "$OUT/tests.txt" tests/test_gpu_backward.py tests/test_dq_tiled.py -k "80_query"
timeout 200 python3 benchmarks/bwd_interleaved.py --timer events --head-dims 128 --seqlens 2048,8192,16384 --masks none \
  --reps "${REPS:-4}" --kinds "attngen,attngen:sm90_bwd_rows.BLOCK_M_UNMASKED={128:80},fa4" > "$OUT/ab.txt" 2>&1
echo "a/b rc $? after ${SECONDS}s"
grep speed "$OUT/ab.txt"
