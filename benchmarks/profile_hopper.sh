#!/usr/bin/env bash
# ncu profiles of the Hopper forward at the configurations the benchmark flags (one device call).
#   bash benchmarks/profile_hopper.sh   -> $OUT/ncu_<config>.txt
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for cfg in "128 16384" "256 8192" "64 4096 --causal"; do
  set -- $cfg
  name="hd$1_$2${3:+_causal}"
  timeout 240 "$NCU" -k regex:attn_fwd -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats \
    python3 benchmarks/profile_one.py --head-dim "$1" --seqlen "$2" ${3:-} > "$OUT/ncu_$name.txt" 2>&1
  echo "$name: exit $?"
done
