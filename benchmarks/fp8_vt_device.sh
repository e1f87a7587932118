#!/bin/bash
# The fp8 V transpose against another tree's (PREV_TREE: `git archive <commit> attngen templates`, carried): the fp8
# GPU tests, then fp8_forward.py (bf16, the fp8 call and the transpose alone, in alternating rounds) of each tree in
# turn, two rounds each. Writes $OUT/tests_fp8.txt and $OUT/ab.txt.
. benchmarks/device_env.sh
gpu_tests "${TEST_LIMIT:-120}" "$OUT/tests_fp8.txt" tests/test_gpu_fp8.py
for round in 1 2; do
  for t in prev new; do
    echo "== $t, round $round" >> "$OUT/ab.txt"
    if [ $t = prev ]; then
      PYTHONPATH=$PWD/$PREV_TREE:$PYTHONPATH ATTNGEN_TEMPLATES=$PWD/$PREV_TREE/templates ATTNGEN_CACHE_DIR=/tmp/cache-prev \
        timeout 60 python3 benchmarks/fp8_forward.py --head-dims 128 --seqlens 8192,16384 --rounds 3 >> "$OUT/ab.txt" 2>&1
    else
      timeout 60 python3 benchmarks/fp8_forward.py --head-dims 128 --seqlens 8192,16384 --rounds 3 >> "$OUT/ab.txt" 2>&1
    fi
  done
done
grep -v "^accuracy" "$OUT/ab.txt"
