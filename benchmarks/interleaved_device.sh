#!/bin/bash
# attngen's and FlashAttention-4's kernels timed alternately (benchmarks/bwd_interleaved.py; IL_KINDS: its --kinds, an A/B
# of family constants beside FA4 for example): the backward, then the
# forward, at IL_HEAD_DIMS x IL_SEQLENS, causal and not; optional block traces of the dK/dV kernel first (TRACE=1).
# .whl and .fa4whl carried (move generated/ and benchmarks/results/ out of the working tree for the call).
#   bash benchmarks/interleaved_device.sh [tag]     (writes $OUT/interleaved_<tag>.tgz)
. benchmarks/device_env.sh
[[ "${IL_KINDS:-fa4}" == *fa4* ]] && { fa4_peer || exit 1; }
tag=interleaved_${1:-base}
dir=$OUT/$tag
mkdir -p "$dir"
SECONDS=0
if [ -n "$TRACE" ]; then
  python3 benchmarks/block_trace.py --patch /tmp/trace_tpl || exit 1
  mkdir -p "$dir/trace"
  ATTNGEN_TEMPLATES=/tmp/trace_tpl ATTNGEN_CACHE_DIR=/tmp/trace_cache timeout 200 python3 benchmarks/block_trace.py \
    --head-dims "${IL_HEAD_DIMS:-64,128}" --seqlens "${IL_SEQLENS:-2048,8192,16384}" --out "$dir/trace" \
    > "$dir/trace/summary.txt" 2>&1
  grep "^hd" "$dir/trace/summary.txt" | cut -c1-200
fi
timeout ${IL_BWD_LIMIT:-300} python3 benchmarks/bwd_interleaved.py --head-dims "${IL_HEAD_DIMS:-64,128}" \
  --seqlens "${IL_SEQLENS:-2048,8192,16384}" --reps "${IL_REPS:-8}" --kinds "${IL_KINDS:-attngen,fa4}" > "$dir/bwd.txt" 2>&1
echo "backward rc $? after ${SECONDS}s"
grep "speed" "$dir/bwd.txt"
if [ -n "$IL_FORWARD" ]; then
  timeout ${IL_FWD_LIMIT:-150} python3 benchmarks/bwd_interleaved.py --forward --head-dims "${IL_HEAD_DIMS:-64,128}" \
    --seqlens "${IL_SEQLENS:-2048,8192,16384}" --reps "${IL_REPS:-8}" > "$dir/fwd.txt" 2>&1
  echo "forward rc $? after ${SECONDS}s"
  grep "speed" "$dir/fwd.txt"
fi
cd "$OUT" && tar czf "$tag.tgz" "$tag" && rm -rf "$dir"
