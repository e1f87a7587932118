#!/bin/bash
# hd256's split with warpgroup 0's first dQ box staged beside warpgroup 1's two (sm90_bwd_split.STAGE_OTHER_WG: two
# bulk reductions a step, 8 red.global.add.v4.f32 a thread left) on the device: the GPU tests that run the split
# (and the varlen ones at hd256), then the planner's plan against STAGE_OTHER_WG off and cuDNN, causal and unmasked,
# alternated in one process by CUDA events. REPS (4). Carry .whl. Writes $OUT/tests.txt, ab_causal.txt, ab_none.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_tests "${TEST_LIMIT:-240}" "$OUT/tests.txt" tests/test_gpu_backward.py tests/test_gpu_varlen.py \
  -k "${TESTS_K:-split_staging or split_staged or split_dv or 256}"
ab() {
  local name=$1
  shift
  timeout 200 python3 benchmarks/bwd_interleaved.py --timer events --head-dims 256 --seqlens 2048,8192,16384 \
    --reps "${REPS:-4}" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name rc $? after ${SECONDS}s"
  grep speed "$OUT/$name.txt"
}
ab ab_causal --masks causal --kinds "attngen:sm90_bwd_split.STAGE_OTHER_WG=False,attngen,cudnn"
ab ab_none --masks none --kinds "attngen:sm90_bwd_split.STAGE_OTHER_WG=False,attngen,cudnn"
