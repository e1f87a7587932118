"""Where the host time of a dense forward and backward call goes (device machine): a loop of calls that never waits
(small shapes, so the host is the slower side), with the layers under the op timed by wrappers that add up their
own wall time: the family's launch, the launcher, the parameter blocks, the buffers, the tensor maps, the driver's
launches. Per call, in microseconds; what the wrappers do not cover is the op's dispatch and autograd. With
--cprofile, then a cProfile of the backward's callees (cumulative and own time).

    python3 benchmarks/host_layers.py [--calls 300] [--seqlen 256] [--cprofile]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

import attngen
from attngen.bench import measure
from attngen.runtime import op
from attngen.spec.model import AttentionSpec

SPENT: dict[str, float] = defaultdict(float)
#: The layers timed (attngen's module path, attribute); those a tree lacks are skipped.
LAYERS = (("runtime.op", "_fwd_impl"), ("runtime.op", "_bwd_impl"),
          ("families.sm90_bwd_ready:ReadyHopperBackward", "run"), ("families.sm90_bwd:Sm90Backward", "launch"),
          ("families.sm90_fwd_ready:ReadyHopperForward", "run"), ("families.sm90_fwd:Sm90Forward", "launch"),
          ("runtime.prepared:CallGeometry", "of"), ("runtime.prepared:ReadyCache", "get"),
          ("runtime.prepared:ParamTemplate", "make"), ("runtime.backward", "param_block"),
          ("runtime.backward", "buffers"), ("runtime.backward", "preprocess"), ("runtime.backward", "finish"),
          ("runtime.variant_args", "prepare"), ("runtime.tma", "tensor_map"), ("runtime.tma", "map_key"),
          ("runtime.driver:PreparedLaunch", "__call__"), ("runtime.driver", "launch"))


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - start
    return wrapper


def wrap(owner: Any, attr: str, name: str) -> None:
    setattr(owner, attr, timed(name, getattr(owner, attr)))


def loop(label: str, fn: Callable[[], object], calls: int) -> None:
    for _ in range(10):   # warm-up, outside the wrappers' sums
        fn()
    SPENT.clear()
    total = measure.host_us_per_call(fn, calls, warmup=0)
    print(f"{label}: {total:.0f} us/call")
    for name, s in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"    {s / calls * 1e6:7.1f} us  {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--cprofile", action="store_true", help="then profile the backward's callees")
    parser.add_argument("--plain", action="store_true", help="no wrappers: the calls' totals only")
    args = parser.parse_args()
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    q, k, v = (torch.randn(1, args.seqlen, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    out = kernel(q, k, v)
    if not args.plain:
        for key in list(op._LAUNCHERS):
            op._LAUNCHERS[key] = timed("fwd launcher (op._LAUNCHERS)", op._LAUNCHERS[key])
        for key in list(op._BWD_LAUNCHERS):
            op._BWD_LAUNCHERS[key] = timed("bwd launcher (op._BWD_LAUNCHERS)", op._BWD_LAUNCHERS[key])
        for owner, attr in LAYERS:
            # A tree without a layer (an older one, timed for comparison) skips it.
            module, _, cls = owner.partition(":")
            try:
                obj: Any = importlib.import_module(f"attngen.{module}")
            except ImportError:
                continue
            obj = getattr(obj, cls, None) if cls else obj
            if obj is not None and hasattr(obj, attr):
                wrap(obj, attr, f"{owner}.{attr}")

    def forward() -> None:
        with torch.no_grad():
            kernel(q, k, v)

    def backward() -> None:
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    def training_forward() -> None:
        kernel(q, k, v)

    loop(f"forward b1 s{args.seqlen} hd128 causal", forward, args.calls)
    loop(f"forward with grad b1 s{args.seqlen} hd128 causal", training_forward, args.calls)
    loop(f"backward b1 s{args.seqlen} hd128 causal", backward, args.calls)
    if args.cprofile:
        profile(backward, args.calls)


def profile(fn: Callable[[], object], calls: int) -> None:
    """cProfile of `calls` calls of fn(): the callees by cumulative time, then by their own."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    for key, count in (("cumulative", 45), ("tottime", 25)):
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats(key).print_stats(count)
        print(text.getvalue())


if __name__ == "__main__":
    main()
