#!/bin/bash
# Ablation of the sm90 forward's softmax traits (device machine), from a checkout of this branch with main's code
# beside it in ab_main/ (here: rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main):
#   [SOFTMAX_TESTS=0] [ROUNDS=2] bash benchmarks/softmax_device.sh        (writes $OUT/softmax/)
# GPU forward tests of the branch's defaults, then forward TFLOP/s of main and of each (threshold, poly tiles)
# variant (sm90_fwd.RESCALE_THRESHOLD, EXP2_POLY_TILES), two rounds, each in its own process.
. benchmarks/device_env.sh
dir=$OUT/softmax
mkdir -p "$dir"
if [ "${SOFTMAX_TESTS:-1}" != 0 ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_forward.py tests/test_gpu_variants.py > "$dir/tests.txt" 2>&1
  tail -3 "$dir/tests.txt"
fi
variant() {  # name threshold poly-dict
  rm -rf "/tmp/v_$1" && mkdir -p "/tmp/v_$1" && cp -r attngen templates "/tmp/v_$1/"
  sed -i "s/^RESCALE_THRESHOLD = .*/RESCALE_THRESHOLD = $2/; s/^EXP2_POLY_TILES = .*/EXP2_POLY_TILES = $3/" \
    "/tmp/v_$1/attngen/families/sm90_fwd.py"
  grep -q "^RESCALE_THRESHOLD = $2" "/tmp/v_$1/attngen/families/sm90_fwd.py" || { echo "no switch"; exit 1; }
}
variant plain 0.0 "{}"
variant rescale 8.0 "{}"
variant poly 0.0 "{64: 4}"
variant both 8.0 "{64: 4}"
variant poly8 0.0 "{64: 8, 128: 4}"
for round in $(seq "${ROUNDS:-2}"); do
  PYTHONPATH=/tmp/site:$PWD/ab_main python3 benchmarks/time_bwd.py --forward --head-dims 64,128,256 --tag main
  for v in plain rescale poly both poly8; do
    PYTHONPATH=/tmp/site:/tmp/v_$v python3 benchmarks/time_bwd.py --forward --head-dims 64,128,256 --tag "$v"
  done
done 2>&1 | tee "$dir/ab.txt"
