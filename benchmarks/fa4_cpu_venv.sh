#!/bin/bash
# A virtual environment on this machine (no GPU) that compiles FlashAttention-4's Hopper kernels, for reading their
# SASS beside attngen's (benchmarks/fa4_cubins.py, benchmarks/sass_schedule.py --fa4): the versions the device runs as
# a peer (flash-attn-4 4.0.0b19, cutlass-dsl 4.5.3 for CUDA 13), for this machine's Python, with torch's CPU build.
# FA4 compiles on the CPU under torch's FakeTensorMode (its own fake mode: nothing launches). About 2 minutes.
#   bash benchmarks/fa4_cpu_venv.sh [DIR]      (default /tmp/fa4-cpu; prints DIR/bin/python)
set -e
venv=${1:-/tmp/fa4-cpu}
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0 numpy
"$venv/bin/pip" install -q --no-deps flash-attn-4==4.0.0b19 quack-kernels==0.5.0 apache-tvm-ffi==0.1.12 \
  nvidia-cutlass-dsl==4.5.3 nvidia-cutlass-dsl-libs-cu13==4.5.3 nvidia-cutlass-dsl-libs-base==4.5.3
# What those import, without the CUDA libraries their metadata would pull (quack imports triton at load).
"$venv/bin/pip" install -q typing_extensions cuda-python einops triton torch-c-dlpack-ext
"$venv/bin/python" -c "import flash_attn.cute.interface" && echo "$venv/bin/python"
