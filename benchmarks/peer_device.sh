#!/bin/bash
# One run of attngen against every peer the device machine can run, FlashAttention-4 included (device machine,
# ~560 s): the wheels in .whl (pydantic) and .fa4whl (bash ../shared/tools/fa4-wheels.sh .fa4whl) both carried. The
# two wheel folders take ~59 MiB of the 64 a call carries: move generated/ and benchmarks/results/ out of the working
# tree for the call.
#   bash benchmarks/peer_device.sh        (writes $OUT/peers.tgz: fwd/, bwd/, varlen/, decode/ and their logs)
# Each suite checks every output against a float64 reference before timing it; --budget-s bounds each suite.
. benchmarks/device_env.sh
fa4_peer || exit 1
python3 -c "import flash_attn.cute" || echo "FA4 does not import: the suites run without it"
SECONDS=0
seqlens=${PEER_SEQLENS:-2k,8k,16k}
python3 -m attngen bench --head-dims 64,128,256 --seqlens "$seqlens" --peers cudnn,fa4 --budget-s 130 \
  --out "$OUT/fwd" > "$OUT/fwd.log" 2>&1
echo "fwd rc $? after ${SECONDS}s"
python3 -m attngen bench --backward --head-dims 64,128,256 --seqlens "$seqlens" --peers flash,cudnn,fa4 \
  --budget-s 190 --out "$OUT/bwd" > "$OUT/bwd.log" 2>&1
echo "bwd rc $? after ${SECONDS}s"
python3 -m attngen bench --varlen --budget-s 60 --out "$OUT/varlen" > "$OUT/varlen.log" 2>&1
echo "varlen rc $? after ${SECONDS}s"
python3 -m attngen bench --decode --budget-s $((520 - SECONDS)) --out "$OUT/decode" > "$OUT/decode.log" 2>&1
echo "decode rc $? after ${SECONDS}s"
# A call brings back 8 files: one archive.
cat "$OUT"/fwd/bench.md "$OUT"/bwd/bwd.md "$OUT"/varlen/varlen.md "$OUT"/decode/decode.md 2>/dev/null | head -150
cd "$OUT" && rm -f ./*/*.png && tar czf peers.tgz ./*.log fwd bwd varlen decode && rm -rf ./*.log fwd bwd varlen decode
