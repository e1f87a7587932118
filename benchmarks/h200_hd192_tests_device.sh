#!/bin/bash
# The GPU tests outside test_gpu_backward.py that run hd192's backward (packed batches with empty entries, a chunked
# mask with runtime ALiBi, the flash_attn-compatible calls): -k TESTS_K (192). Writes $OUT/tests.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_tests "${TEST_LIMIT:-220}" "$OUT/tests.txt" tests/test_gpu_varlen.py tests/test_gpu_variants.py \
  tests/test_gpu_compat.py -k "${TESTS_K:-192}"
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/tests.txt" | tail -5
