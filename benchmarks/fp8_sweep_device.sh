#!/bin/bash
# fp8 forward choices on the device machine (writes $OUT/fp8_sweep/): pipelines and stages of this tree, then the
# polynomial exp2 on part of the score tiles (sm90_fwd.EXP2_POLY_TILES, a copy of the tree per setting), ROUNDS rounds.
. benchmarks/device_env.sh
dir=$OUT/fp8_sweep
mkdir -p "$dir"
poly() {  # name dict
  rm -rf "/tmp/v_$1" && mkdir -p "/tmp/v_$1" && cp -r attngen templates tests "/tmp/v_$1/"
  sed -i "s/^EXP2_POLY_TILES: dict\[int, int\] = .*/EXP2_POLY_TILES: dict[int, int] = $2/" "/tmp/v_$1/attngen/families/sm90_fwd.py"
  grep -q "^EXP2_POLY_TILES: dict\[int, int\] = $2" "/tmp/v_$1/attngen/families/sm90_fwd.py" || { echo "no switch"; exit 1; }
}
poly p4 "{128: 4, 256: 4}"
poly p8 "{128: 8, 256: 8}"
for round in $(seq "${ROUNDS:-2}"); do
  python3 benchmarks/fp8_sweep.py --tag base --configs "${CONFIGS:-auto,pingpong:3,pingpong:4,warp_specialized:2,warp_specialized:3}"
  for v in p4 p8; do
    PYTHONPATH=/tmp/site:/tmp/v_$v python3 benchmarks/fp8_sweep.py --tag "$v" --configs auto
  done
done 2>&1 | tee "$dir/sweep.txt"
