#!/bin/bash
# Run a command on this machine with the device machine's NVRTC (13.0; this machine's pip has a newer one): each NVRTC
# release's ptxas allocates registers differently, and a kernel that compiles here without spills may spill there,
# where the builder then plans it again with smaller tiles. The side venv holds only the NVRTC wheel; its library is
# preloaded ahead of the one cuda-bindings would find.
#   bash benchmarks/nvrtc_device_check.sh                         (the catalogue's zero-spill compile tests)
#   bash benchmarks/nvrtc_device_check.sh python my_check.py      (any command)
# NVRTC_VERSION picks another release (a pip version pattern), NVRTC_VENV the side venv's folder.
set -e
version=${NVRTC_VERSION:-13.0.*}
venv=${NVRTC_VENV:-/tmp/nvrtc-${version//[^0-9.]/}}
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "nvidia-cuda-nvrtc==$version"
lib=$(echo "$venv"/lib/python3*/site-packages/nvidia/cu*/lib)
[ -f "$lib/libnvrtc.so.13" ] || { echo "no libnvrtc.so.13 under $lib" >&2; exit 1; }
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LD_PRELOAD=$lib/libnvrtc.so.13
export ATTNGEN_CACHE_DIR=${ATTNGEN_CACHE_DIR:-/tmp/attngen-cache-nvrtc-${version//[^0-9.]/}}
python -c "from cuda.bindings import nvrtc; print('NVRTC', *nvrtc.nvrtcVersion()[1:], sep=' ')"
if [ $# -eq 0 ]; then
  set -- python -m pytest -q -p no:cacheprovider tests/test_catalogue_compile.py
fi
exec "$@"
