#!/bin/bash
# hd128's dS^T store addresses kept across the steps (sm90_bwd_rows.DS_OFFSETS_KEPT) on the device: its GPU test, then
# the default against the switch off and FA4, alternated in one process by CUDA events. REPS (4). Carry .whl and
# .fa4whl (move generated/ and benchmarks/results/ out). Writes $OUT/tests.txt, ab.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_tests "${TEST_LIMIT:-150}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "ds_store or catalogue"
ab_events ab 300 --head-dims 128 --seqlens 2048,8192,16384 --reps "${REPS:-4}" \
  --kinds "attngen:sm90_bwd_rows.DS_OFFSETS_KEPT=False,attngen,fa4"
