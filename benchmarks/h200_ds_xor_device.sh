#!/bin/bash
# The kept dS^T store addresses in one register, each k-step's an XOR of it (sm90_bwd_rows.DS_OFFSETS_XOR), on the device:
# its GPU tests and the kept form's; then hd64 (where it keeps addresses the first time) and hd128 (one register
# instead of four) against the switch off and FA4, and hd128's deterministic plan against the switch off, alternated
# in one process by CUDA events. REPS (3). Carry .whl and .fa4whl (move generated/ and benchmarks/results/ out).
# Writes $OUT/gpu.txt, tests.txt, ab.txt, det.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-150}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "ds_store or ds_xor"
ab_events ab 260 --head-dims 64,128 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DS_OFFSETS_XOR=False,attngen,fa4"
ab_events det 120 --head-dims 128 --seqlens 2048,8192,16384 --reps "${REPS:-3}" \
  --kinds "attngen:sm90_bwd_rows.DS_OFFSETS_XOR=False#deterministic,attngen#deterministic"
