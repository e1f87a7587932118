"""Time every backward tiling the planner finds feasible (dK/dV x dQ), against the SDPA flash backend.

    python benchmarks/sweep_bwd.py --head-dims 64,128 --seqlen 8192 --out sweep_bwd.json [--atomic]

With --atomic it also times the mma.sync family's atomic-dQ plans (FlashAttention-2's order: dQ added with fp32
atomics from the dK/dV kernel, no dQ kernel) at dK/dV tiles whose dQ slice takes up to ATOMIC_MAX_COLS columns per
warp, FlashAttention-2's own tiles among them (hd128 128 KV x 64 queries, hd64 128 x 128, 8 warps). The planner's
register estimate rejects those; ptxas fits them (255 registers, no spills on sm_80 and sm_90a), so each is compiled
first and skipped, with the reason printed, if it spills.
"""

# ruff: noqa: B023  (each closure is timed before the loop moves on)
from __future__ import annotations

import argparse
import json
import sys

import attngen.families.sm80_bwd as sm80_bwd
from attngen.codegen.renderer import render
from attngen.planning.archs import arch_info
from attngen.runtime.kernel import AttentionKernel, current_arch
from attngen.spec.model import AttentionSpec
from attngen.toolchain.cache import compile_cached


def variants(spec: AttentionSpec, arch, limit: int):  # type: ignore[no-untyped-def]
    """sm80_bwd plans for the cheapest `limit` dK/dV tilings, each with the planner's dQ tiling."""
    info = arch_info(arch)
    base = sm80_bwd.Sm80Backward().plan(spec, info, atomic_dq=False)
    tiles = sorted(sm80_bwd.dkdv_candidates(spec, info, [], False),
                   key=lambda t: sm80_bwd.dkdv_cost(spec, info, t, False))
    dqs = sorted(sm80_bwd.dq_candidates(spec, info, []), key=lambda t: sm80_bwd.dq_cost(spec, info, t))
    out = [base.model_copy(update={"dkdv": t}) for t in tiles[:limit]]
    out += [base.model_copy(update={"dq": t}) for t in dqs[1:limit]]
    return out


#: dQ columns per warp the atomic variants may take (the planner's MAX_ATOMIC_DQ_COLS is 32).
ATOMIC_MAX_COLS = 64


def atomic_variants(spec: AttentionSpec, arch, limit: int):  # type: ignore[no-untyped-def]
    """Atomic-dQ plans at the `limit` cheapest dK/dV tiles (by the planner's cost) whose dQ warp tiling exists with up
    to ATOMIC_MAX_COLS columns and whose shared memory fits, register estimate aside; the dQ tiling is the planner's
    (its kernel is built, not launched)."""
    info = arch_info(arch)
    base = sm80_bwd.Sm80Backward().plan(spec, info, atomic_dq=True).model_copy(update={"dq_atomic": True})
    tiles = sm80_bwd.dkdv_candidates(spec, info, [], True, ATOMIC_MAX_COLS, check_registers=False)
    tiles.sort(key=lambda t: sm80_bwd.dkdv_cost(spec, info, t, True))
    tiles = [base.dkdv] + [t for t in tiles if t != base.dkdv]   # the planner's own first
    return [base.model_copy(update={"dkdv": t}) for t in tiles[:limit]]


def grid_variants(spec: AttentionSpec, arch):  # type: ignore[no-untyped-def]
    """Atomic-dQ plans on the grid partition's 8-warp tilings that fit in shared memory, register estimate aside
    (ptxas decides: those that spill are skipped)."""
    info = arch_info(arch)
    base = sm80_bwd.Sm80Backward().plan(spec, info, atomic_dq=True).model_copy(update={"dq_atomic": True})
    tiles = [t for t in sm80_bwd.grid_candidates(spec, info, [], check_registers=False) if t.num_warps == 8]
    return [base.model_copy(update={"dkdv": t}) for t in tiles]


def main() -> int:
    import torch
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--out", default="sweep_bwd.json")
    ap.add_argument("--atomic", action="store_true", help="also the atomic-dQ plans (see the module's docstring)")
    ap.add_argument("--grid", action="store_true", help="also the grid partition's atomic-dQ plans")
    args = ap.parse_args()
    arch = current_arch()
    rows = []
    for d in map(int, args.head_dims.split(",")):
        for causal in (False, True):
            spec = AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if causal else "none")
            s, b, h = args.seqlen, 16384 // args.seqlen, 2048 // d
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ref = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2)
            ref_grads = torch.autograd.grad(ref, (q, k, v), dout, retain_graph=True)
            ms_flash = triton.testing.do_bench(lambda: torch.autograd.grad(ref, (q, k, v), dout, retain_graph=True),
                                               warmup=25, rep=100, return_mode="median")
            kernel = AttentionKernel(spec, {})
            from attngen.toolchain.builder import build

            kernel.cubins[arch] = build(spec, arch)
            out = kernel(q, k, v)
            plans = variants(spec, arch, args.limit) + (atomic_variants(spec, arch, args.limit) if args.atomic else [])
            plans += grid_variants(spec, arch) if args.grid else []
            for i, p in enumerate(plans):
                cubin = compile_cached(render(p))
                spills = [r for r in cubin.resources if r.spill_stores or r.spill_loads]
                if spills and p.dq_atomic:
                    print(f"hd{d} atomic dkdv {p.dkdv.block_n}x{p.dkdv.block_m} w{p.dkdv.num_warps} "
                          f"{'grid ' if p.dkdv.warp_rows == 32 else ''}"
                          f"dc{p.dkdv.d_chunk}: skipped, spills {spills}", flush=True)
                    continue
                kernel.backward.replace(arch, cubin)
                grads = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                err = max(((g.float() - r.float()).norm() / r.float().norm()).item()
                          for g, r in zip(grads, ref_grads, strict=True))
                ms = triton.testing.do_bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                             warmup=25, rep=100, return_mode="median")
                a, c = p.dkdv, p.dq
                row = {"head_dim": d, "causal": causal, "variant": i, "dq_atomic": p.dq_atomic,
                       "dkdv": a.model_dump(), "dq": c.model_dump(),
                       "tflops": flops / ms / 1e9, "flash_tflops": flops / ms_flash / 1e9, "err_vs_flash": err}
                rows.append(row)
                dq = "dq atomic" if p.dq_atomic else f"dq {c.block_m}x{c.block_n} w{c.num_warps} dc{c.d_chunk}"
                print(f"hd{d} {'causal' if causal else 'full  '} dkdv {a.block_n}x{a.block_m} w{a.num_warps} "
                      f"{'grid ' if a.warp_rows == 32 else ''}"
                      f"dc{a.d_chunk} | {dq}: "
                      f"{row['tflops']:.0f} TF/s (flash {row['flash_tflops']:.0f}) err {err:.1e}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
