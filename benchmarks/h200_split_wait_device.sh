#!/bin/bash
# hd256's split: the staging warpgroup's wait for its last bulk reduction's reads moved from the step's start to just
# before the first consumer barrier (sm90_bwd_split.STAGING_WAIT_LATE), and with it warpgroup 0's first dQ box staged
# too (STAGE_OTHER_WG), on the device: the GPU tests that run the split (and the varlen ones at hd256), then the wait at
# the start (main), the late wait, the late wait with warpgroup 0 staging, and cuDNN, causal and unmasked, alternated
# in one process by CUDA events. REPS (4). Carry .whl. Writes $OUT/tests.txt, ab_causal.txt, ab_none.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_tests "${TEST_LIMIT:-300}" "$OUT/tests.txt" tests/test_gpu_backward.py tests/test_gpu_varlen.py \
  -k "${TESTS_K:-split_wait or split_staging or split_staged or split_dv or 256}"
ab() { ab_events "$1" 230 --head-dims 256 --seqlens 2048,8192,16384 --reps "${REPS:-4}" "${@:2}"; }
kinds="attngen:sm90_bwd_split.STAGING_WAIT_LATE=False,attngen,attngen:sm90_bwd_split.STAGE_OTHER_WG=True,cudnn"
ab ab_causal --masks causal --kinds "$kinds"
ab ab_none --masks none --kinds "$kinds"
