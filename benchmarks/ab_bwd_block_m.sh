python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD ATTNGEN_CACHE_DIR=/tmp/agc
for bm in 128 64; do
  echo "== hd64 block_m $bm"
  timeout 150 python3 -c "
import sys, runpy
import attngen.planner_bwd as pb
pb.HOPPER_BWD_BLOCK_M[64] = $bm
sys.argv = ['x', '--head-dims', '64']
runpy.run_path('benchmarks/hopper_bwd_check.py', run_name='__main__')" 2>&1 | tail -1
  timeout 150 python3 -c "
import sys, runpy
import attngen.planner_bwd as pb
pb.HOPPER_BWD_BLOCK_M[64] = $bm
sys.argv = ['x', '--head-dims', '64', '--seqlens', '4096,8192,16384', '--out', '$OUT/bwd64_bm$bm.json']
runpy.run_path('benchmarks/bench_bwd.py', run_name='__main__')" 2>&1 | grep '^bwd' | cut -c1-100
done
