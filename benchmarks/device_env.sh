# Sourced by the device scripts: $OUT, the wheels the device lacks (carried in .whl), PYTHONPATH and
# the kernel cache.
OUT=${OUT:-/tmp/attngen-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
# fa4_peer: FlashAttention-4 (flash_attn.cute, from the carried .fa4whl) installed into /tmp/site and importable.
fa4_peer() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .fa4whl/*.whl \
    || return 1
  export PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/python_packages:$PYTHONPATH
}
export PYTHONUNBUFFERED=1 ATTNGEN_CACHE_DIR=${ATTNGEN_CACHE_DIR:-/tmp/attngen-cache}

# gpu_tests LIMIT_S LOG TEST_FILE...: the GPU tier of the test files under a time limit (a hang shows as the
# timeout), its output into LOG with the exit code and the seconds since the script began appended; the tail shown.
# The tests run in GPU_TEST_WORKERS processes (default 4; 0: one process) through pytest-xdist, which the device image
# has: most of a serial run is NVRTC compiling one kernel at a time (16 cores there), and the processes share the
# kernel cache (ATTNGEN_CACHE_DIR; its entries are locked per key). A worker that dies (a CUDA fault) is reported
# and replaced instead of ending the run.
gpu_tests() {
  local limit=$1 log=$2 workers=()
  shift 2
  if [ "${GPU_TEST_WORKERS:-4}" != 0 ] && command python3 -c "import xdist" 2>/dev/null; then
    workers=(-n "${GPU_TEST_WORKERS:-4}")
  fi
  timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider "${workers[@]}" "$@" > "$log" 2>&1
  echo "tests rc $? after ${SECONDS}s (${workers[*]:-one process})" >> "$log"
  tail -4 "$log"
}

# gpu_info FILE: the GPU (name, driver, clocks, memory, temperature), torch and cuDNN, NVRTC and FA4's versions.
gpu_info() {
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total,temperature.gpu --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
    python3 -c "from attngen.toolchain.compiler import nvrtc_version; print('nvrtc', nvrtc_version())"
    python3 -c "import flash_attn.cute, importlib.metadata as m; print('flash-attn-4', m.version('flash-attn-4'))"
  } > "$1" 2>&1
}

# ab_events NAME LIMIT_S ARGS...: benchmarks/bwd_interleaved.py --timer events ARGS (kinds alternated in one process,
# calls back to back between CUDA events) under a time limit into $OUT/NAME.txt; its exit code and the seconds since
# the script began, then its speed lines.
ab_events() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 benchmarks/bwd_interleaved.py --timer events "$@" > "$OUT/$name.txt" 2>&1
  echo "$name rc $? after ${SECONDS}s"
  grep speed "$OUT/$name.txt"
}

# tree_copy DIR: a fresh copy of this tree's attngen/ and templates/ at DIR, for a variant to edit and time.
tree_copy() {
  rm -rf "$1" && mkdir -p "$1" && cp -r attngen templates "$1/"
}

# time_in TREE LIMIT_S ARGS...: benchmarks/time_bwd.py ARGS under a time limit, run from the attngen and templates at
# TREE ("" for this tree's) with a kernel cache of its own, its lines appended to $TIMES.
time_in() {
  local tree=$1 limit=$2
  shift 2
  if [ -n "$tree" ]; then
    PYTHONPATH=$tree:$PYTHONPATH ATTNGEN_TEMPLATES=$tree/templates ATTNGEN_CACHE_DIR=/tmp/$(basename "$tree").cache \
      timeout "$limit" python3 benchmarks/time_bwd.py "$@" >> "$TIMES" 2>&1
  else
    timeout "$limit" python3 benchmarks/time_bwd.py "$@" >> "$TIMES" 2>&1
  fi
}
