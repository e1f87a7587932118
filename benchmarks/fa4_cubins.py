"""FlashAttention-4's Hopper kernels compiled on this machine (no GPU), for reading their SASS beside attngen's
(benchmarks/sass_schedule.py --fa4 DIR). Run with the Python of benchmarks/fa4_cpu_venv.sh:

    /tmp/fa4-cpu/bin/python benchmarks/fa4_cubins.py --out /tmp/fa4-cubins [--head-dims 64,128] [--masks none,causal]

FA4 compiles under torch's FakeTensorMode (its fake mode launches nothing) with FLASH_ATTENTION_ARCH=sm_90 (which
kernels) and CUTE_DSL_ARCH=sm_90a (the target), and CUTE_DSL_KEEP=cubin writes each kernel's cubin, built by the
DSL's own toolchain as on the device, into OUT/<fwd|bwd>_hd<d>_<mask>/. The shapes are the FA3-paper ones at 2k
(batch 1 here: FA4 picks its tiles by head dim and mask, not by size).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def compile_one(direction: str, head_dim: int, causal: bool, out: Path) -> list[Path]:
    """FA4's kernels of one configuration into `out`; the cubins written."""
    import torch
    from flash_attn.cute import interface
    from torch._subclasses.fake_tensor import FakeTensorMode

    out.mkdir(parents=True, exist_ok=True)
    staging = Path(os.environ["CUTE_DSL_DUMP_DIR"])
    for old in staging.glob("*.cubin"):
        old.unlink()
    interface._flash_attn_fwd.compile_cache.clear()
    interface._flash_attn_bwd.compile_cache.clear()
    batch, seqlen, heads = 1, 2048, 2048 // head_dim
    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.empty(batch, seqlen, heads, head_dim, dtype=torch.bfloat16, device="cuda")
        k, v = torch.empty_like(q), torch.empty_like(q)
        if direction == "fwd":
            interface._flash_attn_fwd(q, k, v, causal=causal)
        else:
            o, do = torch.empty_like(q), torch.empty_like(q)
            lse = torch.empty(batch, heads, seqlen, dtype=torch.float32, device="cuda")
            interface._flash_attn_bwd(q, k, v, o, do, lse, causal=causal)
    for cubin in staging.glob("*.cubin"):
        cubin.rename(out / cubin.name)
    return sorted(out.glob("*.cubin"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/fa4-cubins"))
    ap.add_argument("--head-dims", default="64,128,192,256")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--directions", default="fwd,bwd")
    args = ap.parse_args()
    # Read when the DSL loads (before the import in compile_one): every cubin goes to one staging folder, moved into
    # its configuration's folder after each compile.
    staging = args.out / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    os.environ.update(FLASH_ATTENTION_ARCH="sm_90", CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="cubin",
                      CUTE_DSL_DUMP_DIR=str(staging))
    for direction in args.directions.split(","):
        for d in map(int, args.head_dims.split(",")):
            for mask in args.masks.split(","):
                folder = args.out / f"{direction}_hd{d}_{mask}"
                try:
                    cubins = compile_one(direction, d, mask == "causal", folder)
                except Exception as exc:  # one configuration FA4 refuses or fails must not end the others
                    print(f"{folder.name}: failed: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
                    continue
                print(f"{folder.name}: {len(cubins)} cubins")


if __name__ == "__main__":
    main()
