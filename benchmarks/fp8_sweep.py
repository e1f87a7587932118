"""fp8 forward TFLOP/s per pipeline choice (device machine): the default plan and named pipelines / stages, one line
per configuration, for an A/B of tile and trait choices (each tree in its own process, PYTHONPATH picks it).

    python3 benchmarks/fp8_sweep.py --tag T [--configs auto,pingpong:3,pingpong/128x256] [--head-dims 128,256]

A configuration is `auto` or `<pipeline>[:<stages>][/<block_m>x<block_n>]` (tile_configs.py).
"""

from __future__ import annotations

import argparse

import torch
from tile_configs import spec_fields

import attngen
from attngen.bench.measure import time_ms
from attngen.errors import PlanError
from attngen.planning.planner import plan
from attngen.spec.model import AttentionSpec

#: (seqlen, causal) points: the short causal blocks and the long ones.
POINTS = ((2048, True), (8192, False), (8192, True), (16384, False))


def spec_of(head_dim: int, causal: bool, config: str) -> AttentionSpec:
    return AttentionSpec(head_dim=head_dim, dtype="fp8_e4m3", mask="causal" if causal else "none",
                         **spec_fields(config))  # type: ignore[arg-type]


def rate(spec: AttentionSpec, seqlen: int) -> float:
    kernel = attngen.compile(spec)
    batch, heads = max(1, 16384 // seqlen), 2048 // spec.head_dim
    q, k, v = (torch.randn(batch, seqlen, heads, spec.head_dim, device="cuda").to(torch.float8_e4m3fn)
               for _ in range(3))
    s = torch.full((batch, heads), 0.02, device="cuda")
    flops = 4 * batch * heads * seqlen ** 2 * spec.head_dim * (0.5 if spec.mask.kind.value == "causal" else 1.0)
    return flops / time_ms(lambda: kernel(q, k, v, q_descale=s, k_descale=s, v_descale=s)) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", required=True)
    parser.add_argument("--configs", default="auto")
    parser.add_argument("--head-dims", default="128,256")
    args = parser.parse_args()
    for d in map(int, args.head_dims.split(",")):
        for config in args.configs.split(","):
            for seqlen, causal in POINTS:
                spec = spec_of(d, causal, config)
                try:
                    p = plan(spec, "sm90")
                except PlanError as e:
                    print(f"{args.tag} {config} hd{d}: no plan ({str(e).splitlines()[0]})", flush=True)
                    break
                t = p.tiling
                line = f"{p.pipeline.value} {t.block_m}x{t.block_n} st{t.stages} ov{int(p.roles.intra_wg_overlap)}"
                print(f"{args.tag} {config} hd{d} s{seqlen} {'causal' if causal else 'none'} [{line}]: "
                      f"{rate(spec, seqlen):.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
