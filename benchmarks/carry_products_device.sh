#!/bin/bash
# hd192's carried products (sm90_bwd_halves.CARRY_PRODUCTS_MASKED / _UNMASKED) on the device: halves_ab_device.sh
# against steps that wait for their products, default and deterministic plans, with the backward and varlen GPU tests
# (CP_TESTS; SKIP_TESTS=1 skips them), FA4 in the run when .fa4whl is carried.
#   bash benchmarks/carry_products_device.sh [tag]     (writes $OUT/<tag>/)
HA_BASE="sm90_bwd_halves.CARRY_PRODUCTS_MASKED=False" HA_DETERMINISTIC=1 \
  HA_TESTS="--durations=10 ${CP_TESTS:-tests/test_gpu_backward.py tests/test_gpu_varlen.py}" \
  HA_TEST_LIMIT="${CP_TEST_LIMIT:-300}" HA_AB_LIMIT="${CP_AB_LIMIT:-200}" \
  HA_SEQLENS="${CP_SEQLENS:-2048,8192,16384}" HA_REPS="${CP_REPS:-6}" \
  exec bash benchmarks/halves_ab_device.sh "${1:-carry}"
