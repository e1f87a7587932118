#!/bin/bash
# hd64's per-block costs (NOTES "Analysis: hd64's gap to FA4 at 2k is per block"): the backward with each per-block
# feature off against the default, alternated by CUDA events at 2k and 8k (a cost per block shows at 2k and fades at
# 8k: the stagger, the deferred dQ, which takes the stagger with it, and the overlapped dq_convert's counter at exit);
# then the block trace of the default kernels (each block's wait for K and V, its loop and its epilogue, and a fit of
# block time against steps) at hd64 and hd128, 2k and 8k. REPS (5); AB_LIMIT=0 skips the A/B (the trace only, when
# h200_combined_1208_device.sh has run it). Carry .whl. Writes $OUT/gpu.txt, ab.txt, trace.txt and trace/.
. benchmarks/device_env.sh
SECONDS=0
gpu_info "$OUT/gpu.txt"
[ "${AB_LIMIT:-240}" != 0 ] && ab_events ab "${AB_LIMIT:-240}" --head-dims 64 --seqlens 2048,8192 --reps "${REPS:-5}" \
  --kinds "attngen,attngen:sm90_bwd_rows.DQ_STAGGER_BLOCK_M=[],attngen:sm90_bwd_rows.DQ_DEFERRED_BLOCK_M=[],attngen:sm90_bwd_rows.DQ_OVERLAP=False"
python3 benchmarks/block_trace.py --patch /tmp/trace_tpl || exit 1
ATTNGEN_TEMPLATES=/tmp/trace_tpl ATTNGEN_CACHE_DIR=/tmp/trace.cache timeout "${TRACE_LIMIT:-200}" \
  python3 benchmarks/block_trace.py --head-dims 64,128 --seqlens 2048,8192 --out "$OUT/trace" > "$OUT/trace.txt" 2>&1
echo "trace rc $? after ${SECONDS}s"
grep -v "^   per-step" "$OUT/trace.txt" | tail -12
