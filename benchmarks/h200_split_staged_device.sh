#!/bin/bash
# hd256's split with one dO stage and warpgroup 1's dQ staged (sm90_bwd_split.SPLIT_STAGED_DQ; causal, where dV goes
# early) on the device: the GPU tests that run it, then the planner's plan against SPLIT_STAGED_DQ off, cuDNN and FA4
# (causal), and unmasked with dV early and the staging (DV_EARLY_UNMASKED=True) against the default, alternated in one
# process by CUDA events. REPS (4). Carry .whl and .fa4whl (move generated/ and benchmarks/results/ out: 64 MiB).
# Writes $OUT/tests.txt, ab_causal.txt, ab_none.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_tests "${TEST_LIMIT:-200}" "$OUT/tests.txt" tests/test_gpu_backward.py \
  -k "${TESTS_K:-split_staged or split_dv or 256}"
ab() { ab_events "$1" 200 --head-dims 256 --seqlens 2048,8192,16384 --reps "${REPS:-4}" "${@:2}"; }
ab ab_causal --masks causal --kinds "attngen:sm90_bwd_split.SPLIT_STAGED_DQ=False,attngen,cudnn,fa4"
ab ab_none --masks none --kinds "attngen,attngen:sm90_bwd_split.DV_EARLY_UNMASKED=True,cudnn"
