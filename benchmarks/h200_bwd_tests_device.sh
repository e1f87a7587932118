#!/bin/bash
# The backward's GPU tier on the device (tests/test_gpu_backward.py, every head dim, default and deterministic, the
# A/B equalities of the family switches) under a time limit (TEST_LIMIT, 250 s). Carry .whl. Writes $OUT/tests.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_tests "${TEST_LIMIT:-250}" "$OUT/tests.txt" tests/test_gpu_backward.py ${TESTS_K:+-k "$TESTS_K"}
grep -E "passed|failed|error" "$OUT/tests.txt" | tail -3
