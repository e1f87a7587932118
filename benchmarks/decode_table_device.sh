#!/bin/bash
# The paged decode's table entries by cp.async (a tile's entries land with the K/V of the tile kStages - 1 ahead
# of it): decode_combine_ab.sh over page sizes 16-256 against main's templates (ab_main/), then the GPU decode
# tests. Env SHAPES, PAGES as decode_combine_ab.sh.
source benchmarks/device_env.sh
export SHAPES=${SHAPES:-1x1024,8x1024,32x1024,8x4096,1x32768,8x32768} PAGES=${PAGES:-0,16,64,256}
timeout 330 bash benchmarks/decode_combine_ab.sh > "$OUT/ab_tail.txt" 2>&1
echo "ab rc $? after ${SECONDS}s" >> "$OUT/ab_tail.txt"
gpu_tests 250 "$OUT/tests_decode.txt" tests/test_gpu_decode.py
