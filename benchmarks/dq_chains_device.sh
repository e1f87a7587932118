#!/bin/bash
# The ordered dQ's chains interleaved in dispatch order (HopperBwdTiling.dq_chains, sm90_dq_tiles.ORDERED_DQ_CHAINS),
# measured on the device machine (~8 minutes):
#   bash benchmarks/dq_chains_device.sh        (writes $OUT/dq_chains/; env HEAD_DIMS, SEQLENS, CHAINS, ROUNDS)
# 1. The GPU tests of the deterministic paths: bitwise equality over three runs and accuracy, dense (hd64-256, masks,
#    GQA) and packed (hd128, hd256); a hang shows as the timeout.
# 2. Deterministic backward TFLOP/s (benchmarks/time_bwd.py --deterministic) with ORDERED_DQ_CHAINS = each of CHAINS
#    (1: chain after chain, the order before), each a copy of this tree in its own process, beside the default plans
#    (which the setting does not touch), ROUNDS rounds.
. benchmarks/device_env.sh
dir=$OUT/dq_chains
mkdir -p "$dir"
SECONDS=0
gpu_tests 300 "$dir/tests.txt" tests/test_gpu_backward.py tests/test_gpu_compat.py -k "determin or varlen_gradients"
hd=${HEAD_DIMS:-128,256}
sl=${SEQLENS:-2048,8192}
chains=${CHAINS:-1 4 8 16}
for n in $chains; do
  tree_copy "/tmp/c_$n"
  sed -i "s/^ORDERED_DQ_CHAINS = .*/ORDERED_DQ_CHAINS = $n/" "/tmp/c_$n/attngen/families/sm90_dq_tiles.py"
  grep -q "^ORDERED_DQ_CHAINS = $n$" "/tmp/c_$n/attngen/families/sm90_dq_tiles.py" || { echo "no switch"; exit 1; }
done
TIMES=$dir/times.txt
for round in $(seq "${ROUNDS:-2}"); do
  time_in "" 200 --tag "default r$round" --head-dims "$hd" --seqlens "$sl"
  for n in $chains; do
    time_in "/tmp/c_$n" 200 --deterministic --tag "chains$n r$round" --head-dims "$hd" --seqlens "$sl"
    echo "chains $n round $round after ${SECONDS}s"
  done
done
sort -t' ' -k3,5 "$dir/times.txt" | grep TFLOP
