. benchmarks/device_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .fa4whl/*.whl || exit 1
export PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/python_packages:$PYTHONPATH
D=$OUT/peers_fwd; mkdir -p $D; SECONDS=0
for t in . ab_c64; do PYTHONPATH=/tmp/site:$PWD/$t python3 - $t <<'PY'
import sys
from attngen.spec.model import AttentionSpec
from attngen.toolchain.builder import build
for mask in ("none", "causal"):
    c = build(AttentionSpec(head_dim=64, dtype="bf16", mask=mask), "sm90")
    t = c.source.plan.tiling
    print(sys.argv[1], mask, t.block_m, t.block_n, t.consumer_warpgroups, t.intra_wg_overlap, [(r.registers, r.spill_stores, r.spill_loads) for r in c.resources])
PY
done > $D/plans.txt 2>&1
for r in 1 2; do for t in . ab_c64; do PYTHONPATH=/tmp/site:$PWD/$t timeout 100 python3 benchmarks/time_bwd.py --tag $t --forward --head-dims 64 --seqlens 2048,8192,16384; done; done > $D/ab_causal64.txt 2>&1
echo "ab after $SECONDS s"
timeout 330 python3 -m attngen bench --head-dims 64,128,256 --seqlens 2k,8k,16k --peers cudnn,fa4 --budget-s 240 --out $D/fwd > $D/fwd.log 2>&1
echo "bench after $SECONDS s"
cat $D/plans.txt $D/ab_causal64.txt; cat $D/fwd/bench.md 2>/dev/null | head -40; tail -5 $D/fwd.log
cd $OUT && rm -f ./*/*/*.png && tar czf peers_fwd.tgz peers_fwd && rm -rf peers_fwd
