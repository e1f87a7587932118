#!/bin/bash
# The decode GPU tests, then `attngen bench --varlen` and `--decode` beside every peer, FlashAttention-4 included
# (device machine, ~6 min): the wheels in .whl and .fa4whl carried, generated/ and benchmarks/results/ moved out
# of the working tree for the call (a call carries 64 MiB).   Writes $OUT/decode_peers.tgz.
. benchmarks/device_env.sh
fa4_peer || exit 1
python3 -c "import flash_attn.cute" || echo "FA4 does not import: the suites run without it"
SECONDS=0
gpu_tests 240 "$OUT/tests_decode.txt" tests/test_gpu_decode.py
if [ -n "$SWEEP_SHAPES" ]; then   # the planner's split count (auto) beside fixed ones
  python3 benchmarks/decode_sweep.py --out "$OUT/split_sweep.json" --tilings 32x3 --shapes "$SWEEP_SHAPES" \
    --splits "${SWEEP_SPLITS:-0,1,2,3,4}" > "$OUT/split_sweep.txt" 2>&1
fi
if [ -z "$SKIP_VARLEN" ]; then
  python3 -m attngen bench --varlen --budget-s 60 --out "$OUT/varlen" > "$OUT/varlen.log" 2>&1
  echo "varlen rc $? after ${SECONDS}s"
fi
python3 -m attngen bench --decode --budget-s $((540 - SECONDS)) --out "$OUT/decode" > "$OUT/decode.log" 2>&1
echo "decode rc $? after ${SECONDS}s"
cat "$OUT"/varlen/varlen.md "$OUT"/decode/decode.md 2>/dev/null | head -80
cd "$OUT" && rm -f ./*/*.png && tar czf decode_peers.tgz ./*.log ./*.txt ./*.json varlen decode && rm -rf ./*.log ./*.txt ./*.json varlen decode
