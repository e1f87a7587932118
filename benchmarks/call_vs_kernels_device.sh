#!/bin/bash
# The calls against their kernels, attngen's and FlashAttention-4's, then the forward and backward suites with the
# peers at HEAD_DIMS (64,128) and SEQLENS (2k,8k) (device machine, ~500 s): .whl and .fa4whl carried (move generated/
# and benchmarks/results/ out of the working tree for the call, as for peer_device.sh).
#   bash benchmarks/call_vs_kernels_device.sh     (writes $OUT/call_vs_kernels.tgz)
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/call_vs_kernels
mkdir -p "$dir"
SECONDS=0
dims=${HEAD_DIMS:-64,128}
timeout 150 python3 benchmarks/bwd_kernel_times.py --forward --head-dims "$dims" --seqlens 2048,8192 --rounds 1 \
  > "$dir/kernel_times_fwd.txt" 2>&1
timeout 120 python3 benchmarks/bwd_kernel_times.py --head-dims "$dims" --seqlens 2048 --rounds 1 \
  > "$dir/kernel_times_bwd.txt" 2>&1
echo "kernel times after ${SECONDS}s"
python3 -m attngen bench --head-dims "$dims" --seqlens "${SEQLENS:-2k,8k}" --peers cudnn,fa4 --budget-s 100 \
  --out "$dir/fwd" > "$dir/fwd.log" 2>&1
python3 -m attngen bench --backward --head-dims "$dims" --seqlens "${SEQLENS:-2k,8k}" --peers cudnn,fa4 \
  --budget-s 150 --out "$dir/bwd" > "$dir/bwd.log" 2>&1
echo "benches after ${SECONDS}s"
cat "$dir"/kernel_times_*.txt | grep -v "^    " ; cat "$dir"/fwd/bench.md "$dir"/bwd/bwd.md 2>/dev/null | head -60
cd "$OUT" && rm -f ./*/*/*.png && tar czf call_vs_kernels.tgz call_vs_kernels && rm -rf call_vs_kernels
