#!/usr/bin/env bash
# One device-machine call: set up, then run the named jobs, logs and results under $OUT.
#   bash benchmarks/device.sh tests        # the GPU test tier (pytest -m gpu)
#   bash benchmarks/device.sh tests bench  # ... then the benchmark (when present)
# Needs the wheels the device lacks in .whl (bash ../shared/tools/device-wheels.sh .whl), carried.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/device_env.sh"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)"
  python3 -c "from attngen.toolchain.compiler import nvrtc_version; print('nvrtc', nvrtc_version())"
} 2>&1 | tee "$OUT/environment.txt"
status=0
for job in "$@"; do
  case "$job" in
    tests)
      python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/ --maxfail=15 --junitxml="$OUT/gpu_tests.xml" 2>&1 \
        | tee "$OUT/gpu_tests.log" || status=1 ;;
    bench)
      python3 -m attngen.bench --out "$OUT" 2>&1 | tee "$OUT/bench.log" || status=1 ;;
    *)
      echo "unknown job '$job' (jobs: tests, bench)"; status=2 ;;
  esac
done
exit $status
