#!/bin/bash
# One call for the closing figures (~6 min; carry .whl and .fa4whl, generated/ and benchmarks/results/ moved out):
# the backward suite (h200_bwd_suite_device.sh's: default and deterministic plans, FA4 and cuDNN, CUDA events), the
# forward beside FA4 (bwd_interleaved.py --forward, kernel times), and the decode's batch 32 / 64 x 32k points that
# the waves tiling's tiles limit moved back to the stream tiling (`attngen bench --decode`). Writes $OUT/gpu.txt,
# bwd.txt, fwd.txt, decode/, decode.log.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
timeout "${BWD_LIMIT:-260}" python3 benchmarks/bwd_interleaved.py --timer events --head-dims 64,128,192,256 \
  --seqlens 2048,8192,16384 --reps "${REPS:-3}" --kinds "attngen,attngen#deterministic,fa4,cudnn" > "$OUT/bwd.txt" 2>&1
echo "backward suite rc $? after ${SECONDS}s"
timeout "${FWD_LIMIT:-150}" python3 benchmarks/bwd_interleaved.py --forward --head-dims 64,128,256 \
  --seqlens 2048,8192,16384 --reps "${REPS:-3}" --kinds "attngen,fa4" > "$OUT/fwd.txt" 2>&1
echo "forward rc $? after ${SECONDS}s"
timeout 100 python3 -m attngen bench --decode --batches 32,64 --caches 4k,32k --budget-s 80 --out "$OUT/decode" \
  > "$OUT/decode.log" 2>&1
echo "decode rc $? after ${SECONDS}s"
rm -f "$OUT"/decode/*.png
grep -h speed "$OUT/bwd.txt" "$OUT/fwd.txt" | cut -c1-110
grep "^| " "$OUT/decode/decode.md" | tail -5
