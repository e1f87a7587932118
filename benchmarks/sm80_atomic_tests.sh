#!/bin/bash
# The GPU tests that run the mma.sync backward (atomic dQ by default, atomic-free when deterministic): the backward
# tests, the variants through the multistage pipeline, packed batches. bash benchmarks/sm80_atomic_tests.sh [tag] [files]
. benchmarks/device_env.sh
dir=$OUT/sm80_tests_${1:-1}
mkdir -p "$dir"
shift
for f in ${@:-tests/test_gpu_backward.py tests/test_gpu_variants.py}; do
  gpu_tests ${TEST_LIMIT:-280} "$dir/$(basename $f .py).txt" $f
done
