#!/bin/bash
# The decode's tilings at short caches on the device (batch 8-64 x 1k-4k keys read 0.96-0.97 of cuDNN on the H200,
# h200/refresh_1): benchmarks/decode_sweep.py over the tilings (warp_keys x stages x warps), the planner's split and
# fixed ones, cuDNN in the same process; then hd128's deterministic plan beside the default with the kept dS^T
# offsets (CUDA events). Carry .whl. Writes $OUT/gpu.txt, sweep.json, sweep.txt, det128.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
timeout 300 python3 benchmarks/decode_sweep.py --out "$OUT/sweep.json" --cudnn \
  --shapes "${SHAPES:-1x1024,1x32768,8x1024,32x1024,64x1024,32x4096,64x4096}" \
  --tilings "${TILINGS:-32x3,32x2,16x3,16x2,16x4,16x3x8,16x2x8}" --splits "${SPLITS:-0,1,2}" > "$OUT/sweep.txt" 2>&1
echo "sweep rc $? after ${SECONDS}s"
ab_events det128 150 --head-dims 128 --seqlens 2048,8192,16384 --reps 3 --kinds "attngen#deterministic,attngen"
