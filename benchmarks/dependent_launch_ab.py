"""Backward TFLOP/s with its launches as programmatic dependents and without (device machine), in one process: the same
kernels (griddepcontrol is a no-op in a grid launched without the attribute), the two launch modes alternating ROUNDS
times per configuration, so the machine's drift between processes does not enter the comparison.

    python3 benchmarks/dependent_launch_ab.py [--head-dims 64,128,256] [--seqlens 2048,8192] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import attngen
from attngen.bench.measure import time_ms
from attngen.runtime import driver
from attngen.spec.model import AttentionSpec

_DEPENDENT = driver.PreparedLaunch.__call__


def _plain(self: driver.PreparedLaunch, stream: int, params: Any) -> None:
    """The launch without the dependent-launch attribute (cuLaunchKernel)."""
    config, self._config = self._config, None
    try:
        _DEPENDENT(self, stream, params)
    finally:
        self._config = config


@contextmanager
def launches(dependent: bool) -> Iterator[None]:
    driver.PreparedLaunch.__call__ = _DEPENDENT if dependent else _plain  # type: ignore[method-assign]
    try:
        yield
    finally:
        driver.PreparedLaunch.__call__ = _DEPENDENT  # type: ignore[method-assign]


def backward(head_dim: int, seqlen: int, causal: bool) -> tuple[Callable[[], Any], float]:
    """The backward call of the benchmark's shape (16k tokens, 2048 hidden) and its FLOP."""
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none")
    kernel = attngen.compile(spec)
    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    out = kernel(q, k, v)
    flops = 2.5 * 4 * batch * heads * seqlen ** 2 * head_dim * (0.5 if causal else 1.0)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), flops


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--seqlens", default="2048,8192")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                call, flops = backward(d, s, causal)
                with launches(True):   # the dependent launch checked against the plain one first
                    got = call()
                with launches(False):
                    want = call()
                same = (torch.allclose(a, b, atol=2e-2, rtol=2e-2) for a, b in zip(got, want, strict=True))
                assert all(same), "the launch modes disagree"
                times: dict[bool, list[float]] = {True: [], False: []}
                for _ in range(args.rounds):
                    for dependent in (False, True):
                        with launches(dependent):
                            times[dependent].append(time_ms(call))
                plain, dep = (statistics.median(times[m]) for m in (False, True))
                pairs = zip(times[False], times[True], strict=True)
                print(f"hd{d} s{s} {'causal' if causal else 'none'}: plain {plain * 1e3:.0f} us "
                      f"({flops / plain / 1e9:.0f} TFLOP/s), dependent {dep * 1e3:.0f} us "
                      f"({flops / dep / 1e9:.0f}), x{plain / dep:.3f}; rounds "
                      + " ".join(f"{a * 1e3:.0f}/{b * 1e3:.0f}" for a, b in pairs),
                      flush=True)


if __name__ == "__main__":
    main()
