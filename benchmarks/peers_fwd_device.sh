#!/bin/bash
# The forward suite with cuDNN and FlashAttention-4 (device machine, ~90 s): `attngen bench` at HEAD_DIMS (64,128,256)
# and SEQLENS (2k,8k,16k); with TREES (folders of other versions' attngen and templates, as ab_device.sh takes them)
# first an A/B of time_bwd.py --forward at hd64 across "." and those trees. .whl and .fa4whl carried (move generated/
# and benchmarks/results/ out of the working tree for the call: 64 MiB travel at most).
#   TREES=ab_main bash benchmarks/peers_fwd_device.sh      (writes $OUT/peers_fwd.tgz)
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/peers_fwd
mkdir -p "$dir"
SECONDS=0
if [ -n "$TREES" ]; then
  for round in 1 2; do
    for tree in . $TREES; do
      PYTHONPATH=/tmp/site:$PWD/$tree timeout 100 python3 benchmarks/time_bwd.py --tag "$tree" --forward --head-dims 64 \
        --seqlens 2048,8192,16384
    done
  done > "$dir/ab_hd64.txt" 2>&1
  echo "A/B after ${SECONDS}s"
fi
timeout 330 python3 -m attngen bench --head-dims "${HEAD_DIMS:-64,128,256}" --seqlens "${SEQLENS:-2k,8k,16k}" \
  --peers cudnn,fa4 --budget-s 240 --out "$dir/fwd" > "$dir/fwd.log" 2>&1
echo "bench after ${SECONDS}s"
cat "$dir"/ab_hd64.txt 2>/dev/null; head -40 "$dir/fwd/bench.md"; tail -5 "$dir/fwd.log"
cd "$OUT" && rm -f ./*/*/*.png && tar czf peers_fwd.tgz peers_fwd && rm -rf peers_fwd
