#!/bin/bash
# The backward suite with cuDNN and FlashAttention-4 (device machine, ~7 minutes): `attngen bench --backward` at
# HEAD_DIMS (64,128,192,256) and SEQLENS (2k,8k,16k), whose table carries attngen's deterministic plan beside its
# default ("deterministic / default"). Carry .whl and .fa4whl (bash ../shared/tools/fa4-wheels.sh .fa4whl); they take
# ~60 MiB of the 64 a call carries, so move generated/ and benchmarks/results/ out of the working tree for the call.
#   bash benchmarks/bwd_peers_device.sh        (writes $OUT/bwd/ and $OUT/bwd.log)
. benchmarks/device_env.sh
fa4_peer || exit 1
python3 -c "import flash_attn.cute" || echo "FA4 does not import: the suite runs without it"
SECONDS=0
python3 -m attngen bench --backward --head-dims "${HEAD_DIMS:-64,128,192,256}" --seqlens "${SEQLENS:-2k,8k,16k}" \
  --peers cudnn,fa4 --budget-s "${BUDGET_S:-450}" --out "$OUT/bwd" > "$OUT/bwd.log" 2>&1
echo "bwd rc $? after ${SECONDS}s"
rm -f "$OUT"/bwd/*.png
grep "^| " "$OUT/bwd/bwd.md" | head -40
