#!/bin/bash
# The mma.sync family on the H200 beside FlashAttention-2 (SDPA's flash backend), in one call (~5 min):
#   1. the backward: sweep_bwd.py --atomic (the planner's atomic-free plan and its atomic-dQ default, each against
#      FA2 in the same process; a `pipeline: multistage` spec on sm90 takes the wgmma backward, so this is how the
#      family that A100, L4 and RTX run is timed here);
#   2. the forward: sweep_tilings.py --pipeline multistage, every feasible tiling against FA2.
# HEAD_DIMS (64,128,256), FWD_HEAD_DIMS (64,128), SEQLEN (8192). Writes $OUT/bwd.txt, $OUT/fwd.txt and their JSON.
. benchmarks/device_env.sh
SECONDS=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
timeout "${BWD_LIMIT:-240}" python3 benchmarks/sweep_bwd.py --atomic --limit 1 --head-dims "${HEAD_DIMS:-64,128,256}" \
  --seqlen "${SEQLEN:-8192}" --out "$OUT/bwd.json" > "$OUT/bwd.txt" 2>&1
echo "backward rc $? after ${SECONDS}s" >> "$OUT/bwd.txt"
timeout "${FWD_LIMIT:-240}" python3 benchmarks/sweep_tilings.py --pipeline multistage --max-candidates 8 \
  --head-dims "${FWD_HEAD_DIMS:-64,128}" --seqlen "${SEQLEN:-8192}" --out "$OUT/fwd.json" > "$OUT/fwd.txt" 2>&1
echo "forward rc $? after ${SECONDS}s" >> "$OUT/fwd.txt"
cat "$OUT/bwd.txt" "$OUT/fwd.txt"
