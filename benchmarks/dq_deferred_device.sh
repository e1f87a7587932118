#!/bin/bash
# The sm90 backward's deferred dQ (sm90_bwd.DQ_DEFERRED, DQ_STAGGER) on the device: the GPU tests of the backward and
# varlen with the deferral on (this copy's constant set), then an A/B of main's order against the deferral, with and
# without the stagger, timed alternately in one process (bwd_interleaved.py; DD_KINDS adds kinds, fa4 among them
# when .fa4whl is carried).
#   bash benchmarks/dq_deferred_device.sh [tag]     (writes $OUT/<tag>/)
. benchmarks/device_env.sh
[[ "${DD_KINDS}" == *fa4* ]] && { fa4_peer || exit 1; }
dir=$OUT/${1:-dq_deferred}
mkdir -p "$dir"
SECONDS=0
if [ -z "$SKIP_TESTS" ]; then
  sed -i 's/^DQ_DEFERRED = False/DQ_DEFERRED = True/' attngen/families/sm90_bwd.py
  sed -i "s/^DQ_STAGGER = .*/DQ_STAGGER = ${DD_STAGGER:-False}/" attngen/families/sm90_bwd.py
  grep -n "^DQ_DEFERRED\|^DQ_STAGGER" attngen/families/sm90_bwd.py > "$dir/tests_constants.txt"
  gpu_tests "${DD_TEST_LIMIT:-240}" "$dir/tests.txt" ${DD_TESTS:-tests/test_gpu_backward.py tests/test_gpu_varlen.py}
  sed -i 's/^DQ_DEFERRED = True/DQ_DEFERRED = False/; s/^DQ_STAGGER = .*/DQ_STAGGER = False/' attngen/families/sm90_bwd.py
fi
off="attngen:sm90_bwd.DQ_DEFERRED=False"
on="attngen:sm90_bwd.DQ_DEFERRED=True;sm90_bwd.DQ_STAGGER=False"
stagger="attngen:sm90_bwd.DQ_DEFERRED=True;sm90_bwd.DQ_STAGGER=True"
timeout "${DD_AB_LIMIT:-300}" python3 benchmarks/bwd_interleaved.py --head-dims "${DD_HEAD_DIMS:-64,128}" \
  --seqlens "${DD_SEQLENS:-2048,8192,16384}" --reps "${DD_REPS:-6}" --kinds "${DD_KINDS:-$off,$on,$stagger}" \
  > "$dir/ab.txt" 2>&1
echo "a/b rc $? after ${SECONDS}s"
grep "speed" "$dir/ab.txt"
