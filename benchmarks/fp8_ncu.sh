#!/bin/bash
# Nsight Compute profiles of the sm90 forward at hd128 8k non-causal, fp8 and bf16 (device machine): speed of light,
# pipe utilization, warp states and per-SASS stall samples.   bash benchmarks/fp8_ncu.sh     (writes $OUT/fp8_ncu/)
. benchmarks/device_env.sh
dir=$OUT/fp8_ncu
mkdir -p "$dir"
for dtype in ${NCU_DTYPES:-fp8_e4m3 bf16}; do
  python3 benchmarks/fp8_profile_one.py --dtype "$dtype" || exit 1
  ncu --clock-control none -k "regex:attn_fwd.*(pingpong|specialized)$" -s 2 -c 1 --section SpeedOfLight \
      --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis --section InstructionStats \
      -f -o "$dir/$dtype" python3 benchmarks/fp8_profile_one.py --dtype "$dtype" > "$dir/$dtype.log" 2>&1
  ncu -i "$dir/$dtype.ncu-rep" --page details > "$dir/$dtype.txt" 2>&1
  ncu -i "$dir/$dtype.ncu-rep" --page source --csv --print-source sass > "$dir/$dtype.sass.csv" 2>&1
  gzip -f "$dir/$dtype.sass.csv"
  rm -f "$dir/$dtype.ncu-rep"
done
ls -la "$dir"
