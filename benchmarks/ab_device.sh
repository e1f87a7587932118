#!/bin/bash
# A/B of the backward (with FORWARD=1 the forward) across trees, each in its own process, ROUNDS rounds (2):
# time_bwd.py at HEAD_DIMS (128) and SEQLENS (2048,8192); then the GPU tests in TESTS (none by default).
# TREES (default "ab_main .") names the trees: "." is this one (tagged TAG), any other a folder of another version's
# code (rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main), tagged by its name;
# a tree for a switch is a copy with the module constant sed-ed.
#   TAG=name HEAD_DIMS=64 TESTS=tests/test_gpu_backward.py bash benchmarks/ab_device.sh   (writes $OUT/<TAG>.tgz: ab.txt,
#   tests.txt)
. benchmarks/device_env.sh
tag=${TAG:-ab}
dir=$OUT/$tag
mkdir -p "$dir"
SECONDS=0
fwd=${FORWARD:+--forward}
for round in $(seq "${ROUNDS:-2}"); do
  for tree in ${TREES:-ab_main .}; do
    name=$tag
    [ "$tree" != . ] && name=$(basename "$tree")
    PYTHONPATH=/tmp/site:$PWD/$tree timeout 100 python3 benchmarks/time_bwd.py --tag "$name" $fwd \
      --head-dims "${HEAD_DIMS:-128}" --seqlens "${SEQLENS:-2048,8192}"
  done
done 2>&1 | tee "$dir/ab.txt"
[ -n "$TESTS" ] && gpu_tests 560 "$dir/tests.txt" $TESTS
echo "done after ${SECONDS}s"
cd "$OUT" && tar czf "$tag.tgz" "$tag" && rm -rf "$tag"
