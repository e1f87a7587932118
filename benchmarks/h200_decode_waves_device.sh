#!/bin/bash
# The decode's waves tiling on the device (~5 min; carry .whl and .fa4whl, generated/ and benchmarks/results/ moved
# out of the tree): the decode GPU tests (the waves tiling's included); decode_sweep.py of the stream tiling (128-key
# tiles x 3 stages, 1 block/SM) against the waves one (64 x 3, 2 blocks/SM) alone, at shapes on both sides of the
# rule (16-24 entries: 128-192 blocks of 132 SMs) and long caches, cuDNN in the process; then `attngen bench
# --decode` (contiguous, and pages of 256) beside FA2, cuDNN and FA4 and the copy bandwidth. Writes $OUT/gpu.txt,
# tests.txt, sweep.json, sweep.txt, decode/ and decode.log.
. benchmarks/device_env.sh
fa4_peer || exit 1
SECONDS=0
gpu_info "$OUT/gpu.txt"
gpu_tests "${TEST_LIMIT:-150}" "$OUT/tests.txt" tests/test_gpu_decode.py tests/test_gpu_decode_checks.py
timeout 150 python3 benchmarks/decode_sweep.py --out "$OUT/sweep.json" --cudnn \
  --shapes "${SHAPES:-16x1024,16x4096,24x1024,24x4096,32x32768,64x32768}" --tilings 32x3,16x3 --splits 0 \
  > "$OUT/sweep.txt" 2>&1
echo "sweep rc $? after ${SECONDS}s"
timeout 240 python3 -m attngen bench --decode --budget-s "${DECODE_BUDGET_S:-150}" --out "$OUT/decode" \
  > "$OUT/decode.log" 2>&1
echo "decode rc $? after ${SECONDS}s"
rm -f "$OUT"/decode/*.png
grep "^| " "$OUT/decode/decode.md" | tail -16
