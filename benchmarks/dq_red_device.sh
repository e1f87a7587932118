#!/bin/bash
# The sm90 backward's dQ added from registers by red.global.add.v4.f32 into a tile-ordered accumulator (64-KV-row
# consumers at hd64/128: sm90_bwd_rows.DQ_RED; the head_dim split at hd192/256: sm90_bwd_split.SPLIT_DQ_V4), measured on
# the device machine in one call (~540 s at most), from a checkout of this branch with main's code beside it in
# ab_main/ (here: rm -rf ab_main && mkdir ab_main && git archive main attngen templates | tar -x -C ab_main; carry it
# if it is ignored):
#   bash benchmarks/dq_red_device.sh        (writes $OUT/dq_red/)
# 1. the GPU tests of the backward and varlen (the branch's default: red with 3 stages at hd64/128, v4 at hd256);
# 2. backward TFLOP/s at 8k (hd64, 128, 256; none and causal) of main, of red (the default), of red2 (red with 2
#    Q/dO stages: STAGES = {True: 2, False: 2}) and of off (DQ_RED = False and SPLIT_DQ_V4 = False: main's staged TMA
#    reductions at hd64/128 and v2 reductions at hd256, a control that should read as main), each in its own process;
#    a second round of main and red if the time allows;
# 3. ncu of red at hd256 and hd128 (NCU_BWD_CONFIGS="256 ;128 ") with what time is left.
. benchmarks/device_env.sh
dir=$OUT/dq_red
mkdir -p "$dir"
SECONDS=0
gpu_tests 230 "$dir/tests.txt" tests/test_gpu_backward.py tests/test_gpu_varlen.py
rm -rf /tmp/ab_red2 /tmp/ab_off && mkdir -p /tmp/ab_red2 /tmp/ab_off
cp -r attngen templates /tmp/ab_red2/ && cp -r attngen templates /tmp/ab_off/
sed -i 's/^STAGES = {True: 3, False: 3}$/STAGES = {True: 2, False: 2}/' /tmp/ab_red2/attngen/families/sm90_bwd_rows.py
sed -i 's/^DQ_RED = True$/DQ_RED = False/' /tmp/ab_off/attngen/families/sm90_bwd_rows.py
sed -i 's/^SPLIT_DQ_V4 = True$/SPLIT_DQ_V4 = False/' /tmp/ab_off/attngen/families/sm90_bwd_split.py
grep -q "^STAGES = {True: 2, False: 2}$" /tmp/ab_red2/attngen/families/sm90_bwd_rows.py || { echo "no STAGES switch"; exit 1; }
grep -q "^DQ_RED = False$" /tmp/ab_off/attngen/families/sm90_bwd_rows.py || { echo "no DQ_RED switch"; exit 1; }
grep -q "^SPLIT_DQ_V4 = False$" /tmp/ab_off/attngen/families/sm90_bwd_split.py || { echo "no SPLIT_DQ_V4 switch"; exit 1; }
time_variant() {
  case $1 in main) path=$PWD/ab_main ;; red) path=$PWD ;; red2) path=/tmp/ab_red2 ;; off) path=/tmp/ab_off ;; esac
  PYTHONPATH=/tmp/site:$path timeout "$2" python3 benchmarks/time_bwd.py --tag "$1" --head-dims 64,128,256 --seqlens 8192
}
{
  for variant in main red red2 off; do time_variant $variant 60; done
  if [ $SECONDS -lt 360 ]; then for variant in main red; do time_variant $variant 50; done; fi
  echo "timings done after ${SECONDS}s"
} 2>&1 | tee "$dir/ab.txt"
left=$((530 - SECONDS))
if [ $left -gt 60 ]; then
  NCU_BWD_CONFIGS="256 ;128 " timeout $left bash benchmarks/ncu_bwd.sh red > /dev/null 2>&1
  echo "ncu rc $? after ${SECONDS}s" | tee -a "$dir/ab.txt"
  rm -f "$OUT"/ncu_bwd_red/*.ncu-rep "$OUT"/ncu_bwd_red/*.log
fi
