#!/bin/bash
# The causal backward's tail order at more waves on the H200 (carry .whl): sm90_tail_order.BWD_TAIL_WAVES 0 (the
# grid's own order), 2 (the default), 4 and 8 beside cuDNN, causal, hd64-256 at 2k / 8k / 16k, alternated in one
# process by CUDA events (bwd_interleaved.py --timer events). REPS (3). Writes $OUT/gpu.txt, tail.txt.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
ab_events tail "${LIMIT_S:-400}" --head-dims "${HEAD_DIMS:-64,128,192,256}" --seqlens 2048,8192,16384 --masks causal \
  --reps "${REPS:-3}" --kinds "attngen,attngen:sm90_tail_order.BWD_TAIL_WAVES=0.0,attngen:sm90_tail_order.BWD_TAIL_WAVES=4.0,attngen:sm90_tail_order.BWD_TAIL_WAVES=8.0,cudnn"
