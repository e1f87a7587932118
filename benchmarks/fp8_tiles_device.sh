#!/bin/bash
# fp8 hd128's tilings on the device machine (writes $OUT/$TAG/, TAG=fp8_tiles by default): the fp8 GPU tests, an
# alternated A/B of the fp8 forward's kernels (ping-pong 128 x 128 with the overlap, then the planner's plan), the
# fp8 bench against attngen's bf16 (benchmarks/fp8_device.sh, into $OUT/fp8), and the bf16 hd128 forward's plan
# beside 192 x 128 in three consumer warpgroups and FlashAttention-4 (needs the carried .fa4whl; FA4=0 skips it).
. benchmarks/device_env.sh
dir=$OUT/${TAG:-fp8_tiles}
mkdir -p "$dir"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$dir/gpu.txt" 2>&1
gpu_tests 300 "$dir/tests_fp8.txt" tests/test_gpu_fp8.py
timeout 200 python3 benchmarks/bwd_interleaved.py --forward --dtype fp8_e4m3 --head-dims 128 --seqlens 2048,4096,8192,16384 \
  --reps 5 --kinds "attngen@pingpong/128x128,attngen" > "$dir/ab_fp8.txt" 2>&1
grep "speed" "$dir/ab_fp8.txt"
FP8_TESTS=0 ROUNDS=2 timeout 200 bash benchmarks/fp8_device.sh > /dev/null 2>&1
grep -h "hd128\|ratio" "$OUT"/fp8/bench_*.txt | head -20
if [ "${FA4:-1}" != 0 ]; then
  fa4_peer && timeout 260 python3 benchmarks/bwd_interleaved.py --forward --head-dims 128 --seqlens 2048,4096,8192,16384 \
    --reps 5 --kinds "attngen,attngen@warp_specialized/192x128,fa4" > "$dir/ab_bf16_hd128.txt" 2>&1
  grep "speed" "$dir/ab_bf16_hd128.txt"
fi
