#!/bin/bash
# The deterministic backward on the device: hd64/128's ordered dQ by bulk reductions into the tile-ordered
# accumulator (sm90_bwd_rows.ORDERED_DQ_BULK) and hd256's split with its dV products early (sm90_bwd_split.
# DV_EARLY_DETERMINISTIC). The GPU tests of the deterministic paths, then each change against its switch off and the
# default plan, alternated in one process by CUDA events (REPS, 3). Carry .whl. Writes $OUT/tests.txt, ab_rows.txt,
# ab_split.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_tests "${TEST_LIMIT:-240}" "$OUT/tests.txt" tests/test_gpu_backward.py tests/test_gpu_compat.py \
  -k "${TESTS_K:-determin or ordered_dq or split_det}"
ab() { ab_events "$1" 200 --seqlens 2048,8192,16384 --reps "${REPS:-3}" "${@:2}"; }
ab ab_rows --head-dims 64,128 --kinds "attngen:sm90_bwd_rows.ORDERED_DQ_BULK=False#deterministic,attngen#deterministic,attngen"
ab ab_split --head-dims 256 \
  --kinds "attngen:sm90_bwd_split.DV_EARLY_DETERMINISTIC=False#deterministic,attngen#deterministic,attngen"
