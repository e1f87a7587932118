#!/bin/bash
# Nsight Compute of one small decode call's split kernel, contiguous then paged (benchmarks/profile_decode_small.py;
# env SHAPE, default 1x1024, PAGE, default 256): the details pages and the SASS with stall samples, in one archive.
. benchmarks/device_env.sh
dir=$OUT/ncu_decode_small
mkdir -p "$dir"
args="--shape ${SHAPE:-1x1024} --page ${PAGE:-256}"
python3 benchmarks/profile_decode_small.py $args || exit 1
ncu --clock-control none -k "regex:_split$" -s 4 -c 2 --set full --import-source no -f -o "$dir/decode" \
  python3 benchmarks/profile_decode_small.py $args > "$dir/ncu.log" 2>&1
ncu -i "$dir/decode.ncu-rep" --page details > "$dir/details.txt" 2>&1
ncu -i "$dir/decode.ncu-rep" --page source --csv --print-source sass > "$dir/sass.csv" 2>&1
gzip -f "$dir/sass.csv"
rm -f "$dir/decode.ncu-rep"
grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|Warp Cycles Per Issued|DRAM Throughput" "$dir/details.txt" | head -20
cd "$OUT" && tar czf ncu_decode_small.tgz ncu_decode_small && rm -rf "$dir"
