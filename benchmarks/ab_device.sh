#!/bin/bash
# A/B of this tree's backward (or, with FORWARD=1, forward) against main's code in ab_main/
# (rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main), each tree in its own
# process, ROUNDS rounds (2), time_bwd.py at HEAD_DIMS (128) and 2k/8k; then the GPU tests in TESTS (none by default).
#   TAG=name HEAD_DIMS=64 TESTS=tests/test_gpu_backward.py bash benchmarks/ab_device.sh   (writes $OUT/<TAG>.tgz)
. benchmarks/device_env.sh
tag=${TAG:-ab}
dir=$OUT/$tag
mkdir -p "$dir"
SECONDS=0
fwd=${FORWARD:+--forward}
for round in $(seq "${ROUNDS:-2}"); do
  PYTHONPATH=/tmp/site:$PWD/ab_main timeout 100 python3 benchmarks/time_bwd.py --tag main $fwd --head-dims "${HEAD_DIMS:-128}"
  timeout 100 python3 benchmarks/time_bwd.py --tag "$tag" $fwd --head-dims "${HEAD_DIMS:-128}"
done 2>&1 | tee "$dir/ab.txt"
[ -n "$TESTS" ] && gpu_tests 400 "$dir/tests.txt" $TESTS
echo "done after ${SECONDS}s"
cd "$OUT" && tar czf "$tag.tgz" "$tag" && rm -rf "$tag"
