#!/bin/bash
# The accumulators from the row values with hd64's exps split (the new default), third round: its GPU tests (the
# switches' builds against each other and float64, the deterministic gradients, varlen); hd64 and hd128 against both
# switches off (main before), hd64 also with the overlapped dq_convert off (rows_acc_1 read it 1.6-3.1% faster off at
# 2k), beside FA4; the deterministic plans against the switches off. REPS (3). Carry .whl and .fa4whl (move
# generated/ and benchmarks/results/ out). Writes $OUT/gpu.txt, tests.txt, ab.txt, det.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-200}" "$OUT/tests.txt" tests/test_gpu_backward.py tests/test_gpu_varlen.py \
  -k "row_values or dp_from_d or deterministic_gradients or varlen"
ab_events ab 200 --head-dims 64,128 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DP_FROM_D=False;sm90_bwd_rows.S_FROM_LSE=False,attngen,attngen:sm90_bwd_rows.DQ_OVERLAP=False,fa4"
ab_events det 90 --head-dims 64,128 --seqlens 2048,8192 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DP_FROM_D=False;sm90_bwd_rows.S_FROM_LSE=False#deterministic,attngen#deterministic,attngen"
