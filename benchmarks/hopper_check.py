# ruff: noqa: B023
"""Correctness and speed of the Hopper forward pipelines on the current GPU, one variant per call.

    python benchmarks/hopper_check.py --head-dim 128 --mask causal --pipeline pingpong [--overlap 0]
        [--block-n 128] [--stages 2] [--bench 4096,8192] [--out results.json]

Checks against float64 on odd shapes (outputs poisoned with NaN first), then times the variant
against cuDNN and FlashAttention-2 (SDPA backends) in the same process. Run each variant in its own
process: a variant that hangs or faults cannot take the others down (benchmarks/hopper_sweep.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("ATTNGEN_POISON", "1")

import torch  # noqa: E402
import triton.testing  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from gpu_reference import lse_error, reference, relative_error  # noqa: E402

from attngen.codegen.renderer import render  # noqa: E402
from attngen.planning.planner import plan, plan_with  # noqa: E402
from attngen.runtime.kernel import AttentionKernel  # noqa: E402
from attngen.spec.model import AttentionSpec  # noqa: E402
from attngen.toolchain.compiler import compile_source  # noqa: E402

SHAPES = (  # batch, seqlen_q, seqlen_k, heads, kv_heads
    (2, 1000, 1000, 4, 4), (1, 257, 513, 8, 2), (1, 513, 257, 4, 1), (1, 1, 77, 2, 2), (1, 4097, 4097, 2, 2),
    (1, 128, 128, 2, 2))


def build(args: argparse.Namespace) -> AttentionKernel:
    mask = {"none": {}, "causal": {"mask": "causal"}, "window": {"mask": "sliding_window", "window": [100, 20]}}
    spec = AttentionSpec(head_dim=args.head_dim, dtype=args.dtype, pipeline=args.pipeline, **mask[args.mask])
    p = plan(spec, "sm90")
    update = {k: v for k, v in (("intra_wg_overlap", args.overlap), ("block_n", args.block_n),
                                ("stages", args.stages)) if v is not None}
    if args.warpgroups is not None:
        update.update(consumer_warpgroups=args.warpgroups, block_m=64 * args.warpgroups,
                      num_warps=4 * (args.warpgroups + 1))
    if update:
        p = plan_with(spec, "sm90", p.tiling.model_copy(update=update))
    t = p.tiling
    tag = (f"{p.pipeline.value} cwg{t.consumer_warpgroups} bm{t.block_m} bn{t.block_n} st{t.stages} "
           f"ov{int(t.intra_wg_overlap)}")
    print(f"== {spec.name} {tag}", flush=True)
    t0 = time.time()
    cubin = compile_source(render(p))
    res = cubin.resources[0] if getattr(cubin, "resources", None) else None
    print(f"compiled in {time.time() - t0:.1f}s: {res}", flush=True)
    return AttentionKernel(spec, {p.arch: cubin}), tag


def check(kernel: AttentionKernel, args: argparse.Namespace) -> dict:
    left, right = kernel.spec.window_left, kernel.spec.window_right
    dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[args.dtype])
    worst = {"rel": 0.0, "lse": 0.0}
    for b, sq, sk, h, kvh in SHAPES:
        q = torch.randn(b, sq, h, args.head_dim, device="cuda", dtype=dtype)
        k = torch.randn(b, sk, kvh, args.head_dim, device="cuda", dtype=dtype)
        v = torch.randn(b, sk, kvh, args.head_dim, device="cuda", dtype=dtype)
        out, lse = kernel(q, k, v, return_lse=True)
        torch.cuda.synchronize()
        ref, ref_lse = reference(q, k, v, left, right)
        rel, le = relative_error(out, ref), lse_error(lse, ref_lse)
        print(f"  shape {(b, sq, sk, h, kvh)}: rel {rel:.2e} lse {le:.2e}", flush=True)
        worst["rel"], worst["lse"] = max(worst["rel"], rel), max(worst["lse"], le)
    return worst


def bench(kernel: AttentionKernel, args: argparse.Namespace, seqlen: int) -> dict:
    d, causal = args.head_dim, args.mask == "causal"
    b, h = max(1, 16384 // seqlen), 2048 // d
    dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[args.dtype])
    q, k, v = (torch.randn(b, seqlen, h, d, device="cuda", dtype=dtype) for _ in range(3))
    flops = 4 * b * h * seqlen * seqlen * d * (0.5 if causal else 1.0)
    os.environ["ATTNGEN_POISON"] = "0"
    row = {"seqlen": seqlen}
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    fns = {"attngen": lambda: kernel(q, k, v)}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def run(backend=backend):  # type: ignore[no-untyped-def]
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        fns[name] = run
    for name, fn in fns.items():
        try:
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            row[name] = round(flops / ms / 1e9, 1)
        except Exception as e:  # a peer missing on this build is reported, not fatal
            row[name] = f"error: {type(e).__name__}"
    os.environ["ATTNGEN_POISON"] = "1"
    print(f"  {seqlen}: TFLOP/s {row}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--mask", default="none", choices=("none", "causal", "window"))
    ap.add_argument("--pipeline", default="pingpong")
    ap.add_argument("--overlap", type=int, default=None)
    ap.add_argument("--block-n", type=int, default=None)
    ap.add_argument("--stages", type=int, default=None)
    ap.add_argument("--warpgroups", type=int, default=None, help="consumer warpgroups")
    ap.add_argument("--bench", default="")
    ap.add_argument("--out", default=None)
    ap.add_argument("--templates", default=None, help="render from this template directory (A/B a change)")
    args = ap.parse_args()
    if args.templates:  # before anything renders: the renderer and the cache key read it once
        os.environ["ATTNGEN_TEMPLATES"] = args.templates
    if args.overlap is not None:
        args.overlap = bool(args.overlap)
    kernel, tag = build(args)
    result = {"variant": tag + (f" templates={args.templates}" if args.templates else ""),
              "head_dim": args.head_dim, "mask": args.mask, "dtype": args.dtype,
              "errors": check(kernel, args), "gpu": torch.cuda.get_device_name()}
    ok = result["errors"]["rel"] < (1e-2 if args.dtype == "bf16" else 2e-3) and result["errors"]["lse"] < 1e-3
    print(f"  {'PASS' if ok else 'FAIL'} worst {result['errors']}", flush=True)
    if ok and args.bench:
        result["bench"] = [bench(kernel, args, int(s)) for s in args.bench.split(",")]
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
