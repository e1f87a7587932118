#!/bin/bash
# The split rule's bandwidth term on the device (~4 min; carry .whl and .fa4whl, generated/ and benchmarks/results/
# moved out of the tree): the device's DRAM bandwidth and the split count the rule picks at batch 8; the decode
# GPU tests; decode_combine_cost.py at batch 8 (the chosen splits against one unsplit kernel and cuDNN in the same
# process, CUDA graphs); `attngen bench --decode --batches 8` beside every peer; then the backward against FA4
# alternated with CUDA events around calls back to back (bwd_interleaved.py --timer events), which times the
# overlapped dq_convert as a training loop sees it. Writes $OUT/summary.txt and $OUT/splits.tgz.
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/splits
mkdir -p "$dir"
summary=$OUT/summary.txt
SECONDS=0
python3 - > "$dir/rule.txt" 2>&1 <<'EOF'
from attngen.planning.planner_decode import plan_decode
from attngen.runtime.device import dram_gbps, sm_count
from attngen.families import get
from attngen.spec.model import AttentionSpec
plan = plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), "sm90")
print(f"device 0: {sm_count(0)} SMs, {dram_gbps(0)} GB/s peak DRAM bandwidth")
for keys in (4096, 32768, 131072):
    for paged in (False, True):
        c = get("sm80_decode").splits(plan, batch=8, kv_heads=8, heads=32, seqlen_q=1, keys=keys,
                                      num_sms=sm_count(0), dram_gbps=dram_gbps(0), paged=paged)
        print(f"batch 8 x {keys} keys{' paged' if paged else ''}: {c.splits} ({c.reason})")
EOF
cat "$dir/rule.txt" >> "$summary"
gpu_tests "${TEST_LIMIT:-120}" "$dir/tests_decode.txt" tests/test_gpu_decode.py >> "$summary"
timeout 90 python3 benchmarks/decode_combine_cost.py --shapes 8x4096,8x32768,8x131072 --page 0,256 \
  > "$dir/combine_cost.txt" 2>&1
echo "combine_cost rc $? after ${SECONDS}s" >> "$summary"; grep -v "^floor" "$dir/combine_cost.txt" >> "$summary"
python3 -m attngen bench --decode --batches 8 --caches 4k,32k,128k --budget-s 60 --out "$dir/decode" \
  > "$dir/decode.log" 2>&1
echo "decode rc $? after ${SECONDS}s" >> "$summary"; grep "^| " "$dir/decode/decode.md" >> "$summary" 2>/dev/null
timeout "${BWD_LIMIT:-120}" python3 benchmarks/bwd_interleaved.py --timer events --head-dims 64,128 \
  --seqlens 2048,8192,16384 --reps "${REPS:-3}" --kinds attngen,fa4 > "$dir/bwd_events.txt" 2>&1
echo "backward x FA4 (events) rc $? after ${SECONDS}s" >> "$summary"; grep speed "$dir/bwd_events.txt" >> "$summary"
rm -f "$dir"/*/*.png
(cd "$OUT" && tar czf splits.tgz splits && rm -rf splits)
cat "$summary"
