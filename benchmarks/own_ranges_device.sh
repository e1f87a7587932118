#!/usr/bin/env bash
# The forward's warpgroups walking their own rows' KV tiles (sm90_fwd.OWN_RANGES) on the device: the GPU tests
# (OR_TESTS=0 skips them), then an A/B against the block's range with FlashAttention-4 in the same process.
# The A/B ends by OR_END_S (585) seconds after the start. OR_BASE (the kind against which;
# sm90_fwd.OWN_RANGES=False), OR_PEERS (",fa4" where .fa4whl travels), OR_MASKS (causal), OR_HEAD_DIMS
# (64,128,256), OR_SEQLENS (2048,4096,8192,16384), OR_REPS (4). Results under $OUT.
set -u
. benchmarks/device_env.sh
if [ -d .fa4whl ]; then fa4_peer || echo "FA4 not importable"; fi
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt"
if [ "${OR_TESTS:-1}" = 1 ]; then
  gpu_tests 240 "$OUT/tests.txt" tests/test_gpu_forward.py -k "own_ranges or tail_order"
  gpu_tests 120 "$OUT/tests_varlen.txt" tests/test_gpu_varlen.py -k "packed_forward and (causal or none or sliding)"
fi
timeout $((${OR_END_S:-585} - SECONDS)) python3 benchmarks/bwd_interleaved.py --forward \
  --head-dims "${OR_HEAD_DIMS:-64,128,256}" \
  --seqlens "${OR_SEQLENS:-2048,4096,8192,16384}" --masks "${OR_MASKS:-causal}" --reps "${OR_REPS:-4}" \
  --kinds "attngen:${OR_BASE:-sm90_fwd.OWN_RANGES=False},attngen${OR_PEERS:-}" > "$OUT/ab_${OR_MASKS:-causal}.txt" 2>&1
echo "ab rc $? after ${SECONDS}s" >> "$OUT/ab_${OR_MASKS:-causal}.txt"
tail -40 "$OUT/ab_${OR_MASKS:-causal}.txt"
