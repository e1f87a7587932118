#!/bin/bash
# hd192's KV-row halves against a variant of their module constants on the device: the GPU tests that run hd192's
# backward (HA_TESTS; SKIP_TESTS=1 skips them), then the planner's choice against HA_BASE (module constants as
# bwd_interleaved.py's kinds take them, e.g. "sm90_bwd_halves.DQ_STAGING_TURNS=False"), timed alternately in one
# process, default plans (and deterministic ones with HA_DETERMINISTIC=1), FA4 in the run when .fa4whl is carried.
# HA_TIMER: bwd_interleaved.py's --timer (sum by default; events: CUDA events around calls back to back).
#   HA_BASE=... bash benchmarks/halves_ab_device.sh [tag]     (writes $OUT/<tag>/)
. benchmarks/device_env.sh
dir=$OUT/${1:-halves_ab}
mkdir -p "$dir"
: "${HA_BASE:?HA_BASE: the module constants of the kind to compare with}"
kinds="attngen:$HA_BASE,attngen"
if ls .fa4whl/*.whl >/dev/null 2>&1; then fa4_peer && kinds="$kinds,fa4"; fi
SECONDS=0
if [ -z "$SKIP_TESTS" ]; then
  gpu_tests "${HA_TEST_LIMIT:-300}" "$dir/tests.txt" ${HA_TESTS:-tests/test_gpu_backward.py}
  grep -E "FAILED|ERROR" "$dir/tests.txt" | head
fi
for det in "" ${HA_DETERMINISTIC:+--deterministic}; do
  timeout "${HA_AB_LIMIT:-200}" python3 benchmarks/bwd_interleaved.py --head-dims 192 \
    --seqlens "${HA_SEQLENS:-2048,8192,16384}" --reps "${HA_REPS:-6}" --kinds "$kinds" $det \
    --timer "${HA_TIMER:-sum}" \
    > "$dir/ab${det:+_deterministic}.txt" 2>&1
  echo "a/b ${det:-default} rc $? after ${SECONDS}s"
  grep "speed" "$dir/ab${det:+_deterministic}.txt"
done
