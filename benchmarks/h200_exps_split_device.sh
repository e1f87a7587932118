#!/bin/bash
# Where hd64's and hd128's exps split around dP^T's wait, now that the accumulators start at the row values (the
# registers it needed are free): hd64's 128-query steps at 2, 4, 8 (the default) and 12 of 16 tiles and without the
# warpgroups' stagger, hd128's 64-query steps at 2, 4 (the default) and 6 of 8, beside FA4, alternated in one process by
# CUDA events. REPS (5). Carry .whl and .fa4whl (move generated/ and benchmarks/results/ out). Writes $OUT/gpu.txt,
# hd64.txt, hd128.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
ab_events hd64 150 --head-dims 64 --seqlens 2048,8192 --reps "${REPS:-5}" \
  --kinds "attngen,attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 2},attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 4},attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 12},attngen:sm90_bwd_rows.DQ_STAGGER_BLOCK_M=[],fa4"
ab_events hd128 100 --head-dims 128 --seqlens 2048,8192 --reps "${REPS:-5}" \
  --kinds "attngen,attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 2, 128: 8},attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 6, 128: 8},fa4"
