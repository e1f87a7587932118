#!/bin/bash
# wgmma descriptors built once per operand tile and stepped by adds (hopper_ptx.cuh.j2 desc_at), with the warpgroup
# index known warp-uniform: GPU tests of the sm90 forward and backward, then an A/B against main's code in ab_main/
# (rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main), each tree in its own
# process, two rounds, backward and forward TFLOP/s (time_bwd.py) at 2k and 8k.
#   bash benchmarks/desc_device.sh time|tests     (writes $OUT/desc_<mode>.tgz: ab_bwd.txt and ab_fwd.txt, or tests.txt)
. benchmarks/device_env.sh
dir=$OUT/desc
mkdir -p "$dir"
SECONDS=0
if [ "$1" = tests ]; then
  gpu_tests 560 "$dir/tests.txt" tests/test_gpu_backward.py tests/test_gpu_forward.py tests/test_gpu_varlen.py
  cd "$OUT" && tar czf desc_tests.tgz desc && rm -rf desc
  exit
fi
for round in 1 2; do
  PYTHONPATH=/tmp/site:$PWD/ab_main timeout 100 python3 benchmarks/time_bwd.py --tag main --head-dims 64,128,256
  timeout 100 python3 benchmarks/time_bwd.py --tag desc --head-dims 64,128,256
done 2>&1 | tee "$dir/ab_bwd.txt"
for round in 1 2; do
  PYTHONPATH=/tmp/site:$PWD/ab_main timeout 60 python3 benchmarks/time_bwd.py --forward --tag main --head-dims 64,128,256 --seqlens 8192
  timeout 60 python3 benchmarks/time_bwd.py --forward --tag desc --head-dims 64,128,256 --seqlens 8192
done 2>&1 | tee "$dir/ab_fwd.txt"
echo "done after ${SECONDS}s"
cd "$OUT" && tar czf desc_time.tgz desc && rm -rf desc
