source benchmarks/device_env.sh
gpu_tests 200 "$OUT/tests.txt" tests/test_gpu_decode_checks.py tests/test_gpu_decode.py
SHAPES=1x1024,1x4096,8x4096,1x32768
for mode in new new_host main; do
  echo "== $mode" >> "$OUT/cost.txt"
  case $mode in
    new) python3 benchmarks/decode_check_cost.py --shapes "$SHAPES" >> "$OUT/cost.txt" 2>&1 ;;
    new_host) ATTNGEN_HOST_CHECKS=1 python3 benchmarks/decode_check_cost.py --shapes "$SHAPES" >> "$OUT/cost.txt" 2>&1 ;;
    main) PYTHONPATH=$PWD/ab_main:$PYTHONPATH ATTNGEN_TEMPLATES=$PWD/ab_main/templates ATTNGEN_CACHE_DIR=/tmp/cache-main python3 benchmarks/decode_check_cost.py --shapes "$SHAPES" >> "$OUT/cost.txt" 2>&1 ;;
  esac
done
for round in 1 2; do
  for t in main new v1 v2; do
    echo "== $t, round $round" >> "$OUT/kernels.txt"
    case $t in
      main) PYTHONPATH=$PWD/ab_main:$PYTHONPATH ATTNGEN_TEMPLATES=$PWD/ab_main/templates ATTNGEN_CACHE_DIR=/tmp/cache-main python3 benchmarks/decode_combine_cost.py --shapes 1x1024,1x4096,8x4096 --page 0,16 >> "$OUT/kernels.txt" 2>&1 ;;
      new) python3 benchmarks/decode_combine_cost.py --shapes 1x1024,1x4096,8x4096 --page 0,16 >> "$OUT/kernels.txt" 2>&1 ;;
      *) ATTNGEN_TEMPLATES=$PWD/ab_$t/templates ATTNGEN_CACHE_DIR=/tmp/cache-$t python3 benchmarks/decode_combine_cost.py --shapes 1x1024,1x4096,8x4096 --page 0,16 >> "$OUT/kernels.txt" 2>&1 ;;
    esac
  done
done
grep -v "^  File\|^    \|^Traceback" "$OUT/cost.txt" | cut -c1-160
grep -v "^floor" "$OUT/kernels.txt" | cut -c1-120
