#!/bin/bash
# Nsight Compute of the mma.sync backward's dK/dV kernels beside FlashAttention-2's backward kernel (torch's SDPA
# flash backend) on the same inputs (device machine). SM80_HEAD_DIMS (default "64 128"), SM80_IMPLS (default
# "atomic free fa2"); kernel times of each first, then one full-set report per kernel.
#   bash benchmarks/ncu_sm80_bwd.sh [tag]     (writes $OUT/ncu_sm80_<tag>.tgz: <impl>_hd<d>.txt, .sass.csv.gz, .kernels;
#   one archive, as a call brings back 8 files)
. benchmarks/device_env.sh
dir=$OUT/ncu_sm80_${1:-base}
mkdir -p "$dir"
for d in ${SM80_HEAD_DIMS:-64 128}; do
  for impl in ${SM80_IMPLS:-atomic free fa2}; do
    name=${impl}_hd$d
    kern=dkdv
    [ "$impl" = fa2 ] && kern=dq_dk_dv
    python3 benchmarks/profile_sm80_bwd.py --impl $impl --head-dim $d > "$dir/$name.kernels" 2>&1 \
      || { tail -5 "$dir/$name.kernels"; continue; }
    grep kernel "$dir/$name.kernels"
    ncu --clock-control none -k "regex:$kern" -c 1 --set full --import-source no \
        -f -o "$dir/$name" python3 benchmarks/profile_sm80_bwd.py --impl $impl --head-dim $d > "$dir/$name.log" 2>&1
    ncu -i "$dir/$name.ncu-rep" --page details > "$dir/$name.txt" 2>&1
    ncu -i "$dir/$name.ncu-rep" --page source --csv --print-source sass > "$dir/$name.sass.csv" 2>&1
    gzip -f "$dir/$name.sass.csv"
    rm -f "$dir/$name.ncu-rep"
    grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Ipc A" "$dir/$name.txt" | head -8
  done
done
cd "$OUT" && tar czf "ncu_sm80_${1:-base}.tgz" "ncu_sm80_${1:-base}" && rm -rf "$dir"
