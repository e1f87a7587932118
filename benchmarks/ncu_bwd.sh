#!/bin/bash
# Nsight Compute profiles of the sm90 backward's dK/dV kernel (device machine): speed of light, warp states,
# and the per-instruction stall samples of the SASS, at 8k: by default hd128 non-causal and causal and hd64 non-causal;
# NCU_BWD_CONFIGS="256 ;256 --causal" (head dim, then --causal or nothing; ';' between) names others.
#   bash benchmarks/ncu_bwd.sh [tag]      (writes $OUT/ncu_bwd_<tag>/)
. benchmarks/device_env.sh
dir=$OUT/ncu_bwd_${1:-base}
mkdir -p "$dir"
IFS=';' read -ra configs <<< "${NCU_BWD_CONFIGS:-128 ;128 --causal;64 }"
for cfg in "${configs[@]}"; do
  set -- $cfg
  name=hd$1${2:+_causal}
  python3 benchmarks/profile_one.py --head-dim "$1" --seqlen 8192 --backward $2 >/dev/null || exit 1
  ncu --clock-control none -k regex:dkdv -c 1 --section SpeedOfLight --section WarpStateStats \
      --section SourceCounters --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \
      -f -o "$dir/$name" python3 benchmarks/profile_one.py --head-dim "$1" --seqlen 8192 --backward $2 \
      > "$dir/$name.log" 2>&1
  ncu -i "$dir/$name.ncu-rep" --page details > "$dir/$name.txt" 2>&1
  ncu -i "$dir/$name.ncu-rep" --page source --csv --print-source sass > "$dir/$name.sass.csv" 2>&1
  gzip -f "$dir/$name.sass.csv"
done
ls -la "$dir"
