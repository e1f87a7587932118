# ruff: noqa: B023  (each closure is timed before the loop moves on)
"""Time every tiling the planner finds feasible, on the current GPU, against the SDPA flash backend.

The planner's cost model ranks candidates; this measures them, so the ranking can be checked and
corrected (benchmarks/NOTES.md records what it showed). Usage on a GPU machine:
    python benchmarks/sweep_tilings.py --head-dims 64,128,256 --seqlen 8192 --out results.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from attngen.codegen.renderer import render
from attngen.planning.ir import WarpSpecializedTiling
from attngen.planning.planner import plan, plan_with, rank_time
from attngen.runtime.kernel import AttentionKernel, current_arch
from attngen.spec.model import AttentionSpec
from attngen.toolchain.compiler import compile_source


def variant_kernel(spec: AttentionSpec, base, cand, index: int) -> AttentionKernel:  # type: ignore[no-untyped-def]
    p = plan_with(spec, base.arch, cand.tiling)
    p = p.model_copy(update={"kernel_name": f"{base.kernel_name}_v{index}"})
    cubin = compile_source(render(p))
    return AttentionKernel(spec.model_copy(update={"name": f"{spec.name}_v{index}"}), {p.arch: cubin})


def bench(fn) -> float:  # type: ignore[no-untyped-def]
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--out", default="sweep.json")
    ap.add_argument("--max-candidates", type=int, default=12)
    ap.add_argument("--templates", default=None, help="render from this template directory (A/B a change)")
    ap.add_argument("--tag", default="", help="label printed on every row")
    ap.add_argument("--pipeline", default="auto", help="the specs' pipeline (auto, multistage, pingpong, ...)")
    args = ap.parse_args()
    if args.templates:  # before anything renders: the renderer and the cache key read it once
        os.environ["ATTNGEN_TEMPLATES"] = args.templates
    arch = current_arch()
    rows = []
    for d in map(int, args.head_dims.split(",")):
        for causal in (False, True):
            spec = AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if causal else "none",
                                 pipeline=args.pipeline)
            s, b, h = args.seqlen, max(1, 16384 // args.seqlen), 2048 // d
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                ms_flash = bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                ms_cudnn = bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
            ref = ref.transpose(1, 2).float()
            base = plan(spec, arch)
            fitting = sorted((c for c in base.candidates if c.fits), key=rank_time)   # the planner's order
            for i, cand in enumerate(fitting[: args.max_candidates]):
                t0 = time.perf_counter()
                try:
                    kern = variant_kernel(spec, base, cand, i)
                    compile_s = time.perf_counter() - t0
                    out = kern(q, k, v)
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    ms = bench(lambda: kern(q, k, v)) if err < 2e-2 else math.nan
                except Exception as exc:  # a candidate that fails to build or run is recorded, not fatal
                    print(f"hd{d} causal={causal} cand {i}: {exc}", file=sys.stderr)
                    continue
                tf = flops / ms / 1e9
                row = {"tag": args.tag, "head_dim": d, "causal": causal, "seqlen": s, "rank_by_model": i,
                       "tiling": cand.tiling.model_dump(), "predicted_us": cand.cost.predicted_us,
                       "regs": kern.cubins[arch].resources[0].registers if kern.cubins[arch].resources else None,
                       "ms": ms, "tflops": tf, "flash_tflops": flops / ms_flash / 1e9,
                       "cudnn_tflops": flops / ms_cudnn / 1e9,
                       "pipeline": base.pipeline.value, "rel_err": err,
                       "chosen": cand.tiling == base.tiling, "compile_s": compile_s}
                rows.append(row)
                t = cand.tiling
                overlap = isinstance(t, WarpSpecializedTiling) and t.intra_wg_overlap
                mode = "causal" if causal else "full  "
                print(f"{args.tag}hd{d:3d} {mode} m{t.block_m:3d} n{t.block_n:3d} w{t.num_warps} "
                      f"mt{t.warp_m_tiles} st{t.stages} qr{int(t.q_in_regs)} ov{int(overlap)} "
                      f"pred {cand.cost.predicted_us:8.1f} "
                      f"{tf:6.1f} TF/s  flash {row['flash_tflops']:6.1f}  cudnn {row['cudnn_tflops']:6.1f}  "
                      f"err {err:.1e}"
                      f"{'  <- chosen' if row['chosen'] else ''}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
