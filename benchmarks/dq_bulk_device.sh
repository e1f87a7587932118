#!/bin/bash
# dQ staged in fragment order and added by producer warp 1's contiguous bulk reductions (HopperBwdTiling.dq_bulk)
# against red.global.add.v4 from registers. Trees beside this one (git archive <rev> attngen templates | tar -x -C dir):
# ab_main/ (main before the descriptor change), ab_desc/ (descriptors, red from registers), ab_bulkm/ (this tree with
# sm90_bwd.DQ_RED_MASKED = True: masked specs on the tile-ordered accumulator and bulk reductions too).
# TREES (default "ab_main ab_desc . ab_bulkm") and TESTS (the GPU test files) name others.
#   bash benchmarks/dq_bulk_device.sh time|tests     (writes $OUT/dq_bulk_<mode>.tgz)
. benchmarks/device_env.sh
dir=$OUT/dq_bulk
mkdir -p "$dir"
SECONDS=0
if [ "$1" = tests ]; then
  gpu_tests 560 "$dir/tests.txt" ${TESTS:-tests/test_gpu_backward.py tests/test_gpu_forward.py tests/test_gpu_varlen.py}
else
  for round in 1 2; do
    for tree in ${TREES:-ab_main ab_desc . ab_bulkm}; do
      tag=$(basename "$(cd $tree && pwd)"); [ "$tree" = . ] && tag=${TREE_TAG:-bulk}
      PYTHONPATH=/tmp/site:$PWD/$tree timeout 100 python3 benchmarks/time_bwd.py --tag "$tag" --head-dims 64,128
    done
  done 2>&1 | tee "$dir/ab_bwd.txt"
fi
echo "done after ${SECONDS}s"
cd "$OUT" && tar czf "dq_bulk_${1:-time}.tgz" dq_bulk && rm -rf dq_bulk
