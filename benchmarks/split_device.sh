#!/bin/bash
# The sm90 backward at hd192/256 with head_dim split between the consumer warpgroups, measured (device machine), from
# a checkout of this branch with main's code beside it in ab_main/ (here: rm -rf ab_main && mkdir ab_main &&
# git archive main attngen templates | tar -x -C ab_main):
#   bash benchmarks/split_device.sh [tests|time]     (writes $OUT/split/; both parts when not named: one device call
#                                                    of 10 minutes may not hold both)
# The GPU tests that reach hd192/256 first (a wrong kernel stops here, before any timing); then backward TFLOP/s of
# main (the mma.sync kernels at these head dims) and of the split kernel, two rounds, each in its own process; the
# split's scores by product against by columns (ab_split.py); then the bench against cuDNN at hd192/256 and the ncu
# profiles of the split kernel at hd256.
. benchmarks/device_env.sh
dir=$OUT/split
mkdir -p "$dir"
part=${1:-all}
if [ "$part" != time ]; then
python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_gpu_backward.py tests/test_gpu_varlen.py \
  > "$dir/tests.txt" 2>&1
status=$?
tail -3 "$dir/tests.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_variants.py tests/test_gpu_compat.py -k "256 or 192" \
  > "$dir/tests_variants.txt" 2>&1
tail -3 "$dir/tests_variants.txt"
[ $status -eq 0 ] || exit 1
fi
[ "$part" = tests ] && exit 0
for round in 1 2; do
  for variant in main split; do
    case $variant in main) path=$PWD/ab_main ;; split) path=$PWD ;; esac
    PYTHONPATH=/tmp/site:$path python3 benchmarks/time_bwd.py --tag "$variant" --head-dims 192,256 --seqlens 2048,8192
  done
done 2>&1 | tee "$dir/ab.txt"
python3 benchmarks/ab_split.py 2>&1 | tee "$dir/ab_scores.txt"
python3 -m attngen bench --backward --head-dims 192,256 --seqlens 2k,8k --peers cudnn --out "$dir/bench" \
  > "$dir/bench.txt" 2>&1
tail -20 "$dir/bench.txt"
NCU_BWD_CONFIGS="256 ;256 --causal" bash benchmarks/ncu_bwd.sh split > /dev/null 2>&1
rm -f "$OUT"/ncu_bwd_split/*.ncu-rep "$OUT"/ncu_bwd_split/*.log
