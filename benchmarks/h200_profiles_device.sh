#!/bin/bash
# The points below target that have no Nsight Compute profile (benchmarks/results/PROFILES.md): the deterministic
# backward's dK/dV kernel beside the default one (hd128 8k causal, its lowest ratio; hd256 8k unmasked) and hd256's 8k
# causal backward beside cuDNN's. One call (~5-7 min; full set, one launch each). Carry .whl only (no FA4). Writes
# $OUT/gpu.txt and $OUT/ncu_peer_<tag>.tgz for each tag.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
NCU_CONFIGS="128 --causal" NCU_IMPLS="attngen attngen#deterministic" bash benchmarks/ncu_bwd_peer.sh det_hd128
echo "det_hd128 after ${SECONDS}s"
NCU_CONFIGS="256 " NCU_IMPLS="attngen attngen#deterministic" bash benchmarks/ncu_bwd_peer.sh det_hd256
echo "det_hd256 after ${SECONDS}s"
NCU_CONFIGS="256 --causal" NCU_IMPLS="attngen cudnn" bash benchmarks/ncu_bwd_peer.sh cudnn_hd256
echo "cudnn_hd256 after ${SECONDS}s"
