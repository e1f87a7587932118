#!/bin/bash
# Whether the overlapped dq_convert (sm90_bwd_rows.DQ_OVERLAP: the dK/dV blocks count their performed dQ adds, producer warp
# 1 waiting for its bulk reductions and fencing at each block's exit) costs more at short sequences than the overlap
# returns: hd64 and hd128 at 2k / 8k, the default against the switch off and FA4, alternated in one process by CUDA
# events (ncu_peer_hd64_2k saw 2.3k samples on that exit fence). REPS (4). Carry .whl and .fa4whl (move generated/ and
# benchmarks/results/ out). Writes $OUT/gpu.txt, ab.txt.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
ab_events ab 300 --head-dims 64,128 --seqlens 2048,8192 --reps "${REPS:-4}" \
  --kinds "attngen,attngen:sm90_bwd_rows.DQ_OVERLAP=False,fa4"
