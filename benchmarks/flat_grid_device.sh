#!/bin/bash
# The packed batch's flat grid (runtime/tile_table.py) on the device machine (~6 min): its GPU tests and the varlen
# tests, then the varlen profile (forward, backward and kernels apart, FA4 beside it) with main's code in ab_main/
# beside this tree's. Carry .whl and .fa4whl (move generated/ and benchmarks/results/ out of the tree for the call).
#   rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main
#   bash benchmarks/flat_grid_device.sh     (writes $OUT/tests.txt, $OUT/profile_main.txt, $OUT/profile_flat.txt)
. benchmarks/device_env.sh
fa4_peer || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
SECONDS=0
if [ "${TESTS:-1}" = 1 ]; then
  gpu_tests 300 "$OUT/tests.txt" tests/test_gpu_tile_table.py tests/test_gpu_varlen.py
fi
for round in 1 2; do
  for tree in main flat; do
    if [ "$tree" = main ]; then root=$PWD/ab_main; else root=$PWD; fi
    PYTHONPATH=$root:$PYTHONPATH ATTNGEN_CACHE_DIR=/tmp/cache-$tree python3 benchmarks/varlen_profile.py --only-varlen \
      >> "$OUT/profile_$tree.txt" 2>&1
    echo "profile $tree round $round rc $? after ${SECONDS}s"
  done
done
grep -h -E "^(varlen|dense)" "$OUT"/profile_main.txt "$OUT"/profile_flat.txt
