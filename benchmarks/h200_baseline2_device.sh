#!/bin/bash
# The H200 points the first baseline (h200_refresh_device.sh, results/h200/refresh_1) left out, in one call (~7 min):
#   1. the wgmma backward at hd192 and hd256 beside FlashAttention-4 and cuDNN (SDPA), alternated, by CUDA events;
#   2. the mma.sync path (`pipeline: multistage`) beside FlashAttention-2 (SDPA's flash backend), alternated: the
#      forward by kernel sums, the backward by CUDA events, hd64/128/256.
# SEQLENS (2048,8192,16384 by default), REPS (3). Carry .whl and .fa4whl; move generated/ and benchmarks/results/
# out of the tree for the call (64 MiB). Writes $OUT/gpu.txt, $OUT/summary.txt and $OUT/baseline2.tgz.
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/baseline2
mkdir -p "$dir"
SECONDS=0
seqlens=${SEQLENS:-2048,8192,16384}
summary=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
# run NAME LIMIT_S ARGS...: bwd_interleaved.py ARGS into $dir/NAME.txt, its speed lines into the summary.
run() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 benchmarks/bwd_interleaved.py --seqlens "$seqlens" --reps "${REPS:-3}" "$@" \
    > "$dir/$name.txt" 2>&1
  echo "$name rc $? after ${SECONDS}s" >> "$summary"
  grep speed "$dir/$name.txt" >> "$summary"
}
run bwd_192_256 ${BWD_LIMIT:-170} --timer events --head-dims 192,256 --kinds attngen,fa4,cudnn
run ms_fwd ${MS_FWD_LIMIT:-120} --forward --head-dims 64,128,256 --kinds attngen@multistage,flash
run ms_bwd ${MS_BWD_LIMIT:-200} --timer events --head-dims 64,128,256 --kinds attngen@multistage,flash
(cd "$OUT" && tar czf baseline2.tgz baseline2 && rm -rf baseline2)
cat "$summary"
