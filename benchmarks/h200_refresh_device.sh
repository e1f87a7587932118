#!/bin/bash
# A baseline on a new device kind (the H200 that the device tool lends now), in one call (~8 min): the GPU tests of
# the decode kernels (their own checks included), then attngen beside FlashAttention-4 on the same GPU:
#   1. the forward, alternated per repetition (bwd_interleaved.py --forward), hd64/128/256 at 2k/8k/16k;
#   2. the backward, alternated likewise, hd64/128 at 2k/8k/16k, by CUDA events around calls back to back (a kernel
#      sum counts the overlapped dq_convert's wait; results/h200/refresh_1 ran with the sum);
#   3. `attngen bench --decode` with FA2 and cuDNN (SDPA) and FA4, against the copy bandwidth of the same run;
#   4. with PREV_TEMPLATES (another tree's templates/), the decode kernels' graph times of that tree and this one,
#      alternated (decode_combine_cost.py).
# FWD_HEAD_DIMS, BWD_HEAD_DIMS (64,128,256 and 64,128 by default) choose the head dims. Carry .whl and .fa4whl;
# move generated/ and benchmarks/results/ out of the tree for the call (64 MiB).
# Writes $OUT/gpu.txt, $OUT/summary.txt and $OUT/refresh.tgz (every log and report).
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/refresh
mkdir -p "$dir"
SECONDS=0
gpu_info "$OUT/gpu.txt"
summary=$OUT/summary.txt
gpu_tests "${TEST_LIMIT:-150}" "$dir/tests_decode.txt" tests/test_gpu_decode_checks.py tests/test_gpu_decode.py \
  >> "$summary"
if [ -d "${PREV_TEMPLATES:-}" ]; then
  for round in 1 2; do
    for t in prev new; do
      echo "== $t, round $round" >> "$dir/decode_ab.txt"
      if [ $t = prev ]; then
        ATTNGEN_TEMPLATES=$PREV_TEMPLATES ATTNGEN_CACHE_DIR=/tmp/cache-prev timeout 60 \
          python3 benchmarks/decode_combine_cost.py --shapes 1x1024,1x4096,8x4096 --page 0,16 >> "$dir/decode_ab.txt" 2>&1
      else
        timeout 60 python3 benchmarks/decode_combine_cost.py --shapes 1x1024,1x4096,8x4096 --page 0,16 \
          >> "$dir/decode_ab.txt" 2>&1
      fi
    done
  done
  echo "decode A/B after ${SECONDS}s" >> "$summary"
fi
timeout "${FWD_LIMIT:-170}" python3 benchmarks/bwd_interleaved.py --forward --head-dims "${FWD_HEAD_DIMS:-64,128,256}" \
  --seqlens 2048,8192,16384 --reps "${REPS:-3}" --kinds attngen,fa4 > "$dir/fwd_fa4.txt" 2>&1
echo "forward x FA4 rc $? after ${SECONDS}s" >> "$summary"; grep speed "$dir/fwd_fa4.txt" >> "$summary"
timeout "${BWD_LIMIT:-150}" python3 benchmarks/bwd_interleaved.py --timer events \
  --head-dims "${BWD_HEAD_DIMS:-64,128}" --seqlens 2048,8192,16384 --reps "${REPS:-3}" --kinds attngen,fa4 > "$dir/bwd_fa4.txt" 2>&1
echo "backward x FA4 rc $? after ${SECONDS}s" >> "$summary"; grep speed "$dir/bwd_fa4.txt" >> "$summary"
python3 -m attngen bench --decode --budget-s "${DECODE_BUDGET_S:-100}" --out "$dir/decode" > "$dir/decode.log" 2>&1
echo "decode rc $? after ${SECONDS}s" >> "$summary"; grep "^| " "$dir/decode/decode.md" >> "$summary" 2>/dev/null
rm -f "$dir"/*/*.png
(cd "$OUT" && tar czf refresh.tgz refresh && rm -rf refresh)
cat "$summary"
