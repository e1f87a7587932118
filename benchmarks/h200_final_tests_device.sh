#!/bin/bash
# The GPU tests this session's changes touch, on the final tree (carry .whl): the decode kernels (both tilings), the
# Transformers backend (its generate() runs the KV-cache path), and the backward's kept dS^T addresses and catalogue
# gradients. TEST_LIMIT (320 s). Writes $OUT/gpu.txt, tests.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-320}" "$OUT/tests.txt" tests/test_gpu_decode.py tests/test_gpu_transformers.py \
  tests/test_gpu_backward.py -k "not test_gpu_backward or ds_store or ds_xor or catalogue_gradients"
