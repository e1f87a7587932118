#!/bin/bash
# What the split's ordered dQ pays for its turns (hd192/256 deterministic, device machine, ~4 minutes):
#   bash benchmarks/dq_turn_cost_device.sh        (writes $OUT/dq_turn_cost/; env HEAD_DIMS, SEQLENS, ROUNDS)
# Diagnostic copies of this tree's templates, each timed in its own process (benchmarks/time_bwd.py --deterministic):
#   base     as built;
#   nofence  dq_turn_done without its __threadfence (each consumer thread waiting for its own reductions to
#            complete before the release; the order of dQ's sums is then not guaranteed);
#   nowait   dq_turn without its wait (no order at all; the fences and releases stay);
#   neither  both removed.
# Not kernels to ship: what each step of the turn costs.
. benchmarks/device_env.sh
dir=$OUT/dq_turn_cost
mkdir -p "$dir"
SECONDS=0
hd=${HEAD_DIMS:-256}
sl=${SEQLENS:-2048,8192}
variant() {   # variant NAME PYTHON-EDIT
  tree_copy "/tmp/v_$1"
  python3 - "/tmp/v_$1/templates/common/hopper_bwd_split.cuh.j2" "$2" <<'PY'
import sys
path, edit = sys.argv[1], sys.argv[2]
s = open(path).read()
fence = "void dq_turn_done(int* sem) {\n  __threadfence();\n"
wait = "ld_acquire(sem) < turn &&"
if "nofence" in edit or "neither" in edit:
    assert fence in s
    s = s.replace(fence, "void dq_turn_done(int* sem) {\n")
if "nowait" in edit or "neither" in edit:
    assert wait in s
    s = s.replace(wait, "false && ld_acquire(sem) < turn &&")
open(path, "w").write(s)
PY
}
variant base none || exit 1
variant nofence nofence || exit 1
variant nowait nowait || exit 1
variant neither neither || exit 1
TIMES=$dir/times.txt
for round in $(seq "${ROUNDS:-2}"); do
  time_in "" 150 --tag "default r$round" --head-dims "$hd" --seqlens "$sl"
  for v in base nofence nowait neither; do
    time_in "/tmp/v_$v" 150 --deterministic --tag "$v r$round" --head-dims "$hd" --seqlens "$sl"
    echo "$v round $round after ${SECONDS}s"
  done
done
sort -t' ' -k3,5 "$dir/times.txt" | grep TFLOP
