#!/bin/bash
# The GPU tests of the accumulators from the row values alone (the earlier calls' test limits fell before them): the
# switches' builds against each other and float64 (hd64 with its exps split, hd128, a window, deterministic), the
# constant score-mod derivatives, the XOR-addressed dS^T stores and the ordered dQ at hd64; then varlen, under limits
# of their own. Carry .whl. Writes $OUT/gpu.txt, tests.txt, varlen.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-240}" "$OUT/tests.txt" tests/test_gpu_backward.py -k "row_values or dp_from_d or ds_xor or ordered_dq"
gpu_tests 150 "$OUT/varlen.txt" tests/test_gpu_varlen.py
