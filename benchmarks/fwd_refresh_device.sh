#!/bin/bash
# The forward after a tile change, on the device machine (writes $OUT/$TAG/, TAG=fwd_refresh by default; carry .whl,
# .fa4whl and, for the varlen A/B, BASE_TREE: a copy of another commit's attngen/ and templates/):
#   1. attngen's forward against FlashAttention-4's, alternated (bwd_interleaved.py), hd64/128/256 at 2k-16k;
#   2. fp8 hd128 with the polynomial exp2 on 2 or 4 of the 16 score tiles, alternated against the plan;
#   3. the fp8 bench against attngen's bf16 (fp8_device.sh, two rounds);
#   4. the varlen step (`attngen bench --varlen`) of this tree with FA4, and of BASE_TREE's;
#   5. the GPU tests of the flash_attn-compatible functions and the tile table.
. benchmarks/device_env.sh
fa4_peer || exit 1
dir=$OUT/${TAG:-fwd_refresh}
mkdir -p "$dir"
SECONDS=0
timeout 240 python3 benchmarks/bwd_interleaved.py --forward --head-dims 64,128,256 --seqlens 2048,4096,8192,16384 \
  --reps 5 --kinds attngen,fa4 > "$dir/fwd_fa4.txt" 2>&1
echo "forward x FA4 rc $? after ${SECONDS}s"; grep speed "$dir/fwd_fa4.txt"
timeout 120 python3 benchmarks/bwd_interleaved.py --forward --dtype fp8_e4m3 --head-dims 128 --seqlens 4096,16384 \
  --reps 5 --kinds "attngen,attngen:sm90_fwd.EXP2_POLY_TILES={128:2},attngen:sm90_fwd.EXP2_POLY_TILES={128:4}" \
  > "$dir/ab_fp8_poly.txt" 2>&1
echo "fp8 poly rc $? after ${SECONDS}s"; grep speed "$dir/ab_fp8_poly.txt"
FP8_TESTS=0 ROUNDS=2 timeout 150 bash benchmarks/fp8_device.sh > /dev/null 2>&1
cp -r "$OUT/fp8" "$dir/fp8"; grep -h "s8192\|s16384" "$dir"/fp8/bench_*.txt
timeout 150 python3 -m attngen bench --varlen --peers fa4 -o "$dir/varlen" > "$dir/varlen.log" 2>&1
echo "varlen rc $? after ${SECONDS}s"; tail -12 "$dir/varlen.log"
if [ -d "${BASE_TREE:-}" ]; then   # from BASE_TREE itself, so that its attngen is the one imported
  (cd "$BASE_TREE" && ATTNGEN_TEMPLATES=$PWD/templates ATTNGEN_CACHE_DIR=/tmp/base.cache timeout 150 \
    python3 -m attngen bench --varlen --peers none -o "$dir/varlen_base" > "$dir/varlen_base.log" 2>&1)
  echo "varlen base rc $? after ${SECONDS}s"; tail -8 "$dir/varlen_base.log"
fi
gpu_tests 150 "$dir/tests_rest.txt" tests/test_gpu_compat.py tests/test_gpu_tile_table.py
