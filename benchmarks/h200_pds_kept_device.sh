#!/bin/bash
# hd192's halves and hd256's split addressing their P^T and dS^T stores from a lane offset kept across the steps
# (sm90_bwd_halves.TRANS_AT_KEPT, sm90_bwd_split.FRAGS_AT_KEPT) on the device: their GPU tests and the catalogue's
# gradients (store_frags, which every rows kernel's dK/dV epilogue uses, now addresses by XOR), then each against its
# switch off and cuDNN, alternated in one process by CUDA events. REPS (3). Carry .whl. Writes $OUT/gpu.txt,
# tests.txt, ab192.txt, ab256.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-200}" "$OUT/tests.txt" tests/test_gpu_backward.py \
  -k "kept_p_and_ds or catalogue_gradients or ds_xor"
ab_events ab192 150 --head-dims 192 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_halves.TRANS_AT_KEPT=False,attngen,cudnn"
ab_events ab256 150 --head-dims 256 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_split.FRAGS_AT_KEPT=False,attngen,cudnn"
