#!/usr/bin/env bash
# Runs benchmarks/hopper_check.py once per line of a variant file, each in its own process with a
# time limit (a variant that deadlocks cannot stall the rest). Results: $OUT/hopper.jsonl, logs.
#   bash benchmarks/hopper_sweep.sh benchmarks/hopper_variants.txt
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/environment.txt"
grep -v '^#' "$1" | while read -r line; do
  [ -z "$line" ] && continue
  echo "### $line" | tee -a "$OUT/hopper.log"
  timeout "${VARIANT_TIMEOUT:-150}" python3 benchmarks/hopper_check.py $line --out "$OUT/hopper.jsonl" 2>&1 \
    | tail -n 40 | tee -a "$OUT/hopper.log"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$OUT/hopper.log"
done
