#!/bin/bash
# The backward suite on the device, every wgmma head dim in one process: attngen's default and deterministic plans,
# FlashAttention-4 and cuDNN (SDPA) alternated per repetition, timed by CUDA events around calls back to back
# (bwd_interleaved.py --timer events), hd64/128/192/256 at 2k/8k/16k, causal and not. HEAD_DIMS, REPS (3).
# Carry .whl and .fa4whl; move generated/ and benchmarks/results/ out of the tree for the call (64 MiB).
# Writes $OUT/gpu.txt, $OUT/bwd.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
timeout "${LIMIT:-540}" python3 benchmarks/bwd_interleaved.py --timer events --head-dims "${HEAD_DIMS:-64,128,192,256}" \
  --seqlens 2048,8192,16384 --reps "${REPS:-3}" --kinds "attngen,attngen#deterministic,fa4,cudnn" > "$OUT/bwd.txt" 2>&1
echo "suite rc $? after ${SECONDS}s"
grep speed "$OUT/bwd.txt"
