#!/bin/bash
# The cost models against the H200 (issue 13 part 6): `attngen bench`'s forward suite (hd64 / 128 / 256 at 2k / 8k /
# 16k, both masks, cuDNN beside) and backward suite (hd64-256), each row with the plan's predicted time, measured /
# predicted, and the run's own matmul ceiling (torch.matmul of two 8192 x 8192 bf16 matrices). Carry .whl. Writes
# $OUT/gpu.txt, fwd/ and bwd/ (bench.json, bwd.json and their reports), fwd.log, bwd.log.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
timeout 170 python3 -m attngen bench --head-dims 64,128,256 --seqlens 2048,8192,16384 --peers cudnn --budget-s 140 \
  -o "$OUT/fwd" > "$OUT/fwd.log" 2>&1
echo "fwd rc $? after ${SECONDS}s"
timeout 110 python3 -m attngen bench --backward --head-dims 64,128,192,256 --seqlens 2048,8192,16384 --peers cudnn \
  --budget-s 90 -o "$OUT/bwd" > "$OUT/bwd.log" 2>&1
echo "bwd rc $? after ${SECONDS}s"
tail -5 "$OUT/fwd.log" "$OUT/bwd.log"
