#!/bin/bash
# A dK/dV block's start and end (both switches off by default, on main): V loaded after the first Q/dO stage on an
# mbarrier of its own (sm90_bwd_rows.V_LATE), and dV written out before the warpgroups meet at the block's end
# (DV_OUT_FIRST). One call of ~6 min: their GPU test (dK, dV bitwise against the default order, dQ within rounding,
# exact against float64), then the default against each and both at hd64 / hd128, 2k and 8k, both masks (CUDA
# events, kinds alternated). Prediction: each +0.3-1% at 2k (shorter blocks: causal more), level at 8k. REPS (3).
# Carry .whl. Writes $OUT/gpu.txt, tests.txt, block_ends.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-100}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "block_start_and_end_orders"
ab_events block_ends "${AB_LIMIT:-240}" --head-dims 64,128 --seqlens 2048,8192 --reps "${REPS:-3}" \
  --kinds "attngen,attngen:sm90_bwd_rows.V_LATE=True,attngen:sm90_bwd_rows.DV_OUT_FIRST=True,attngen:sm90_bwd_rows.V_LATE=True;sm90_bwd_rows.DV_OUT_FIRST=True"
