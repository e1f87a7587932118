#!/bin/bash
# Prepared launches on the device machine (NOTES.md, "prepared launches"): the host layers of this tree (wrappers on),
# then each tree's call totals (--plain) and time_bwd.py's backward and forward TFLOP/s, ROUNDS rounds (2), each tree
# in its own process; then the GPU tests in TESTS (none by default) under LIMIT seconds (500).
#   TAG=name TREES="ab_main ." HEAD_DIMS=64,128 SEQLENS=2048,8192 TESTS="tests/..." bash benchmarks/prepared_device.sh
#   (writes $OUT/<TAG>.tgz)
. benchmarks/device_env.sh
tag=${TAG:-prepared}
dir=$OUT/$tag
mkdir -p "$dir"
SECONDS=0
if [ -z "$NO_TIMING" ]; then
  timeout 200 python3 benchmarks/host_layers.py > "$dir/host_layers.txt" 2>&1
  tail -40 "$dir/host_layers.txt"
  for round in $(seq "${ROUNDS:-2}"); do
    for tree in ${TREES:-ab_main .}; do
      name=$tag
      [ "$tree" != . ] && name=$(basename "$tree")
      echo "== $name round $round"
      PYTHONPATH=/tmp/site:$PWD/$tree timeout 100 python3 benchmarks/host_layers.py --plain
      for fwd in "" --forward; do
        PYTHONPATH=/tmp/site:$PWD/$tree timeout 150 python3 benchmarks/time_bwd.py --tag "$name" $fwd \
          --head-dims "${HEAD_DIMS:-64,128}" --seqlens "${SEQLENS:-2048,8192}"
      done
    done
  done 2>&1 | tee "$dir/ab.txt"
fi
[ -n "$TESTS" ] && gpu_tests "${LIMIT:-500}" "$dir/tests.txt" $TESTS
echo "done after ${SECONDS}s"
cd "$OUT" && tar czf "$tag.tgz" "$tag" && rm -rf "$tag"
