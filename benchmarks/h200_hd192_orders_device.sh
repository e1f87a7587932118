#!/bin/bash
# hd192's step orders on the device, alternated in one process by CUDA events (bwd_interleaved.py): the planner's
# default against its carried products flipped (unmasked: CARRY_PRODUCTS_UNMASKED=True; causal:
# CARRY_PRODUCTS_MASKED=False), then the deterministic plans with and without DV_EARLY. REPS (5). Writes
# $OUT/carry_none.txt, carry_causal.txt, det.txt.
. benchmarks/device_env.sh
SECONDS=0
ab() { ab_events "$1" 200 --head-dims 192 --seqlens 2048,8192,16384 --reps "${REPS:-5}" "${@:2}"; }
ab carry_none --masks none --kinds "attngen,attngen:sm90_bwd_halves.CARRY_PRODUCTS_UNMASKED=True"
ab carry_causal --masks causal --kinds "attngen,attngen:sm90_bwd_halves.CARRY_PRODUCTS_MASKED=False"
ab det --deterministic --kinds "attngen:sm90_bwd_halves.DV_EARLY=False,attngen"
