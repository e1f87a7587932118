#!/bin/bash
# The staged dQ box published (fence.proxy.async, then the arrive) after dK's product completes rather than right
# after the stores (kPublishLate): an A/B against main's code in ab_main/, two rounds, hd128 backward at 2k and 8k,
# then the GPU tests of the backward. Not merged (results/h100/fence: slower); the change is kept as
# benchmarks/experiments/next-fence.patch (git apply it first).    bash benchmarks/fence_device.sh   (writes $OUT/fence.tgz)
. benchmarks/device_env.sh
dir=$OUT/fence
mkdir -p "$dir"
SECONDS=0
for round in 1 2; do
  PYTHONPATH=/tmp/site:$PWD/ab_main timeout 60 python3 benchmarks/time_bwd.py --tag main --head-dims 128
  timeout 60 python3 benchmarks/time_bwd.py --tag fence --head-dims 128
done 2>&1 | tee "$dir/ab_bwd.txt"
gpu_tests 400 "$dir/tests.txt" tests/test_gpu_backward.py
echo "done after ${SECONDS}s"
cd "$OUT" && tar czf fence.tgz fence && rm -rf fence
