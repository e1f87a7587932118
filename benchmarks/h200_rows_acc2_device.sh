#!/bin/bash
# The accumulators from the row values, second round (rows_acc_1 read hd64 2-6% slower with both S^T's and dP^T's
# accumulators loaded before their products, each product waiting for the shared loads, and +1-3% with hd64's exps
# split around dP^T's wait, which the freed registers allow): hd64 and hd128 with both off, both on and the split,
# dP^T's alone (its -D loaded under S^T's product) with the split at 8 and at 4 of 16 tiles, beside FA4, alternated in
# one process by CUDA events; the new GPU tests first. REPS (3). Carry .whl and .fa4whl (move generated/ and
# benchmarks/results/ out). Writes $OUT/gpu.txt, tests.txt, ab.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-150}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "row_values or dp_from_d"
ab_events ab 240 --head-dims 64,128 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DP_FROM_D=False;sm90_bwd_rows.S_FROM_LSE=False,attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 8},attngen:sm90_bwd_rows.S_FROM_LSE=False;sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 8},attngen:sm90_bwd_rows.S_FROM_LSE=False;sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 4},fa4"
