#!/bin/bash
# V loaded after the first Q/dO stage on an mbarrier of its own (sm90_bwd_rows.V_LATE, off by default), in one call
# of ~4 min: its GPU test (dK, dV bitwise against V loaded with K, dQ within rounding, exact against float64), then
# V_LATE off against on at hd64 / hd128, 2k and 8k, both masks (CUDA events, kinds alternated). Prediction: a block's
# first S^T no longer waits for V's 16-32 KB, +0.3-1% at 2k (shorter blocks: causal more), level at 8k. REPS (3).
# Carry .whl. Writes $OUT/gpu.txt, tests.txt, v_late.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-90}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "v_after_the_first_stage"
ab_events v_late "${AB_LIMIT:-150}" --head-dims 64,128 --seqlens 2048,8192 --reps "${REPS:-3}" \
  --kinds "attngen,attngen:sm90_bwd_rows.V_LATE=True"
