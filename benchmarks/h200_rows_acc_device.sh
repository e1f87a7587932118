#!/bin/bash
# S^T's and dP^T's accumulators starting at the row values (sm90_bwd_rows.DP_FROM_D: -LSE / scale_log2 and -D, written so
# by the preprocess), on the device: its GPU tests, the catalogue's gradients and varlen; then hd64 and hd128 with the
# switch off, on, and on with hd64's exps split around dP^T's wait (8 of 16 tiles: the registers it frees are what the
# split lacked), beside FA4, alternated in one process by CUDA events; the deterministic plan off and on; and the
# overlapped dq_convert's switch at 2k (ncu_peer_hd64_2k's exit fence). REPS (3). Carry .whl and .fa4whl (move
# generated/ and benchmarks/results/ out). Writes $OUT/gpu.txt, tests.txt, ab.txt, det.txt, dq_overlap.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-220}" "$OUT/tests.txt" tests/test_gpu_backward.py tests/test_gpu_varlen.py \
  -k "row_values or dp_from_d or catalogue_gradients or varlen"
ab_events ab 200 --head-dims 64,128 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DP_FROM_D=False,attngen,attngen:sm90_bwd_rows.EXPS_BEFORE_DP={64: 4, 128: 8},fa4"
ab_events det 70 --head-dims 64,128 --seqlens 2048,8192 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DP_FROM_D=False#deterministic,attngen#deterministic"
ab_events dq_overlap 70 --head-dims 64,128 --seqlens 2048 --reps 4 \
  --kinds "attngen,attngen:sm90_bwd_rows.DQ_OVERLAP=False,fa4"
