#!/bin/bash
# Issue 12's varlen step and issue 13's fp8 forward on the H200 (~3 min; carry .whl and .fa4whl, generated/ and
# benchmarks/results/ moved out of the tree): `attngen bench --varlen` at hd64/128 beside torch's varlen_attn (FA2) and
# FA4 (alternating rounds), then fp8_forward.py at hd128 8k/16k in alternating rounds against attngen's bf16.
# Writes $OUT/summary.txt and $OUT/varlen_fp8.tgz.
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/varlen_fp8
mkdir -p "$dir"
summary=$OUT/summary.txt
SECONDS=0
python3 -m attngen bench --varlen --head-dims 64,128 --budget-s "${VARLEN_BUDGET_S:-110}" --out "$dir/varlen" \
  > "$dir/varlen.log" 2>&1
echo "varlen rc $? after ${SECONDS}s" >> "$summary"; grep "^| \|Timing" "$dir/varlen/varlen.md" >> "$summary" 2>/dev/null
timeout "${FP8_LIMIT:-120}" python3 benchmarks/fp8_forward.py --head-dims 128 --seqlens 8192,16384 --rounds 5 \
  --json "$dir/fp8_rounds.json" > "$dir/fp8_rounds.txt" 2>&1
echo "fp8 rc $? after ${SECONDS}s" >> "$summary"; cat "$dir/fp8_rounds.txt" >> "$summary"
rm -f "$dir"/*/*.png
(cd "$OUT" && tar czf varlen_fp8.tgz varlen_fp8 && rm -rf varlen_fp8)
cat "$summary"
