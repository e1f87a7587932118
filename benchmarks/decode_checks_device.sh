#!/bin/bash
# The decode kernels' own checks (runtime.device_checks) on the device: the GPU tests of the decode, KV-cache and
# flash_attn-compatible paths (tests.txt), then the checks' cost (decode_check_cost.py, cost.txt) for this tree's
# defaults, this tree with ATTNGEN_HOST_CHECKS=1 and main's tree (ab_main/, `git archive main attngen templates |
# tar -x -C ab_main`), and with KERNELS=1 the kernels' graph times (decode_combine_cost.py, kernels.txt) of main's
# templates against this tree's; two rounds each. Few files: the device returns at most eight.
source benchmarks/device_env.sh
gpu_tests ${TEST_LIMIT:-300} "$OUT/tests.txt" tests/test_gpu_decode_checks.py tests/test_gpu_decode.py \
  tests/test_gpu_varlen.py ${EXTRA_TESTS}
SHAPES=${SHAPES:-1x1024,1x4096,8x4096,1x32768}
main_tree() {
  PYTHONPATH=$PWD/ab_main:$PYTHONPATH ATTNGEN_TEMPLATES=$PWD/ab_main/templates ATTNGEN_CACHE_DIR=/tmp/cache-main "$@"
}
for round in 1 2; do
  for mode in new new_host main; do
    echo "== $mode, round $round" >> "$OUT/cost.txt"
    case $mode in
      new) python3 benchmarks/decode_check_cost.py --shapes "$SHAPES" >> "$OUT/cost.txt" 2>&1 ;;
      new_host) ATTNGEN_HOST_CHECKS=1 python3 benchmarks/decode_check_cost.py --shapes "$SHAPES" >> "$OUT/cost.txt" 2>&1 ;;
      main) main_tree python3 benchmarks/decode_check_cost.py --shapes "$SHAPES" >> "$OUT/cost.txt" 2>&1 ;;
    esac
  done
  if [ -n "$KERNELS" ]; then
    echo "== main, round $round" >> "$OUT/kernels.txt"
    main_tree python3 benchmarks/decode_combine_cost.py --shapes "$SHAPES,8x32768" --page 0,16,256 >> "$OUT/kernels.txt" 2>&1
    echo "== new, round $round" >> "$OUT/kernels.txt"
    python3 benchmarks/decode_combine_cost.py --shapes "$SHAPES,8x32768" --page 0,16,256 >> "$OUT/kernels.txt" 2>&1
  fi
done
grep -v "^  File\|^    \|^Traceback" "$OUT/cost.txt" | cut -c1-160
