#!/bin/bash
# Nsight Compute, full set, of the sm90 backward's main kernel: attngen's dK/dV kernel beside FlashAttention-4's
# (flash_attn.cute, carried in .fa4whl) on the same inputs (device machine). NCU_CONFIGS="128 ;128 --causal" (head
# dim, then --causal or nothing; ';' between), NCU_IMPLS="attngen fa4" (space-separated; cudnn is SDPA's cuDNN
# backward; an attngen kind may override family constants as profile_one.py --impl does:
# "attngen:sm90_bwd.X=[64];sm90_bwd.Y=True", and end in #deterministic for the deterministic plan), NCU_TREE (a folder of
# another version's attngen, as benchmarks/ab_device.sh's trees; this tree's by default), NCU_FORWARD=1 (the forward
# kernels instead: attngen's attn_fwd beside FA4's FlashAttentionForwardSm90), NCU_SEQLEN (8192). Move generated/ and
# benchmarks/results/ out of the tree for the call when carrying .fa4whl.
#   bash benchmarks/ncu_bwd_peer.sh [tag]      (writes $OUT/ncu_peer_<tag>.tgz: <impl>_<cfg>.txt, .sass.csv.gz, .log,
#   .kernels; a call brings back 8 files, so one archive, the reports left out)
. benchmarks/device_env.sh
[ -n "$NCU_TREE" ] && export PYTHONPATH=/tmp/site:$PWD/$NCU_TREE
if [[ "${NCU_IMPLS:-fa4}" == *fa4* ]]; then
  fa4_peer || exit 1
fi
tag=ncu_peer_${1:-base}
dir=$OUT/$tag
mkdir -p "$dir"
IFS=';' read -ra configs <<< "${NCU_CONFIGS:-128 ;128 --causal}"
for cfg in "${configs[@]}"; do
  set -- $cfg
  for impl in ${NCU_IMPLS:-attngen fa4}; do
    name=$(echo "$impl" | tr -c 'A-Za-z0-9_\n' '_')_hd$1${2:+_causal}
    kern=dkdv direction=--backward
    [ "$impl" = fa4 ] && kern=BackwardSm90
    [ "$impl" = cudnn ] && kern=bprop
    if [ -n "$NCU_FORWARD" ]; then
      kern=attn_fwd direction= name=fwd_$name
      [ "$impl" = fa4 ] && kern="Forward|fwd"
      [ "$impl" = cudnn ] && kern=fprop
    fi
    python3 benchmarks/profile_one.py --impl "$impl" --head-dim "$1" --seqlen "${NCU_SEQLEN:-8192}" $direction $2 > "$dir/$name.kernels" 2>&1 \
      || { tail -5 "$dir/$name.kernels"; continue; }
    ncu --clock-control none -k "regex:$kern" -c 1 --set full --import-source no \
        -f -o "$dir/$name" python3 benchmarks/profile_one.py --impl "$impl" --head-dim "$1" --seqlen "${NCU_SEQLEN:-8192}" $direction $2 \
        > "$dir/$name.log" 2>&1
    ncu -i "$dir/$name.ncu-rep" --page details > "$dir/$name.txt" 2>&1
    ncu -i "$dir/$name.ncu-rep" --page source --csv --print-source sass > "$dir/$name.sass.csv" 2>&1
    gzip -f "$dir/$name.sass.csv"
    grep -E "Duration|Elapsed Cycles|Compute \(SM\)|L2 Cache Throughput|Issue Slots Busy" "$dir/$name.txt" | head -6
  done
done
cd "$OUT" && tar czf "$tag.tgz" --exclude="*.ncu-rep" "$tag" && rm -rf "$dir"
ls -la "$OUT"
