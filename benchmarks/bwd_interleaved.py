"""attngen's and FlashAttention-4's backward kernels timed alternately (device machine): for each shape, REPS
repetitions of [one attngen backward call, one FA4 backward call], each call under its own torch.profiler, its
kernels' device times summed. The two implementations see the same clocks and temperatures within a repetition, so
the ratio of their medians is steadier than two separate runs' (one round of a separate run moved ±5%). Shapes as
`attngen bench --backward` (batch 16384 / seqlen, 2048 / head_dim heads). --forward times the forward call instead.

    python3 benchmarks/bwd_interleaved.py [--head-dims 64,128] [--seqlens 2048,8192,16384] [--reps 10] [--forward]
    python3 benchmarks/bwd_interleaved.py --kinds "attngen:sm90_bwd_rows.DQ_DEFERRED_BLOCK_M=[],attngen"   (an A/B)
    python3 benchmarks/bwd_interleaved.py --deterministic --kinds ...   (attngen's deterministic plans)
    python3 benchmarks/bwd_interleaved.py --forward --kinds "attngen,attngen@warp_specialized/192x128"   (named tiles,
        tile_configs.py; beside constants: attngen:<module>.<CONST>=<literal>@<tiles>)
    python3 benchmarks/bwd_interleaved.py --forward --dtype fp8_e4m3 --kinds ...   (fp8 q, k, v with descales 0.02)
    python3 benchmarks/bwd_interleaved.py --timer events ...   (CUDA events around --calls calls back to back, the
        host ahead of the GPU: where a call's kernels overlap; span: the first kernel's start to the last one's end of
        one call under the profiler, host gaps included; the per-kernel lines show the sums either way)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from tile_configs import spec_fields

import attngen
from attngen.bench.backward import _impl
from attngen.bench.measure import kernel_span_us, kernel_times_us, make_inputs
from attngen.bench.model import BWD_OVER_FWD, Config
from attngen.spec.model import AttentionSpec


@contextlib.contextmanager
def overrides(kind: str) -> Iterator[None]:
    """A kind "attngen:sm90_bwd_rows.DQ_DEFERRED_BLOCK_M=[]" builds attngen's kernels with those family constants (each
    value a Python literal, converted to the constant's type), restored afterwards."""
    _, _, spec = kind.partition(":")
    saved = []
    for item in filter(None, spec.split(";")):
        name, _, value = item.partition("=")
        module_name, _, attr = name.rpartition(".")
        module = importlib.import_module(f"attngen.families.{module_name}")
        old = getattr(module, attr)
        saved.append((module, attr, old))
        setattr(module, attr, type(old)(ast.literal_eval(value)))
    try:
        yield
    finally:
        for module, attr, old in saved:
            setattr(module, attr, old)


def deterministic_flag(kind: str) -> tuple[str, bool]:
    """A kind without its '#deterministic' suffix, and whether it had one (attngen kinds only)."""
    base, _, flag = kind.partition("#")   # attngen[:<constants>][@<tiles>][#deterministic]
    if flag and (flag != "deterministic" or not kind.startswith("attngen")):
        raise SystemExit(f"kind {kind!r}: the only flag is '#deterministic', on attngen kinds")
    return base, flag == "deterministic"


def make_step(kind: str, index: int, head_dim: int, seqlen: int, causal: bool, forward: bool,
              deterministic: bool = False, dtype: str = "bf16") -> Callable[[], None]:
    """One call of `kind`. Each kind's spec has a name of its own: the op finds a kernel's launchers by a key of its
    spec's name and its forward cubins, so kinds that differ only in their backward builds would otherwise share the
    last one registered."""
    mask = "causal" if causal else "none"
    ours = kind.startswith("attngen")
    base, flagged = deterministic_flag(kind)
    deterministic = deterministic or flagged
    prefix, _, config = base.partition("@")
    tiles = spec_fields(config) if ours else {}
    spec = AttentionSpec(name=f"{mask}_hd{head_dim}_kind{index}", head_dim=head_dim, dtype=dtype, mask=mask,
                         deterministic=deterministic, **tiles)  # type: ignore[arg-type]
    fp8 = dtype == "fp8_e4m3"
    assert not fp8 or (forward and ours), "fp8_e4m3 times attngen's forward only"
    q, k, v = (t.requires_grad_(not forward) for t in make_inputs(Config(head_dim, seqlen, causal), "bf16", 0))
    with overrides(prefix if ours else ""):
        kernel = attngen.compile(spec) if ours else None
        fwd = _impl("attngen" if ours else kind, kernel, causal)
        if fp8:
            q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
            scale = torch.full((q.shape[0], q.shape[2]), 0.02, device=q.device)
            step = lambda: kernel(q, k, v, q_descale=scale, k_descale=scale, v_descale=scale)  # noqa: E731
        elif forward:
            step = lambda: fwd(q, k, v)  # noqa: E731
        else:
            dout = torch.randn_like(q)
            out = fwd(q, k, v)
            step = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)  # noqa: E731
        step()   # the kernels are built now, under the overrides
        if kernel is not None:   # which build each kind runs: kinds of an A/B must differ here
            built = kernel.cubins if forward else kernel.backward.cubins
            keys = " ".join(c.cache_key[:12] for c in built.values())
            print(f"{kind}: {'forward' if forward else 'backward'} {keys}")
    return step  # type: ignore[return-value]


def events_us(step: Callable[[], None], calls: int) -> float:
    """Microseconds per call of `calls` calls queued back to back between two CUDA events."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def one(head_dim: int, seqlen: int, causal: bool, kinds: list[str], reps: int, forward: bool,
        deterministic: bool = False, dtype: str = "bf16", timer: str = "sum", calls: int = 10) -> None:
    steps = {kind: make_step(kind, i, head_dim, seqlen, causal, forward, deterministic, dtype)
             for i, kind in enumerate(kinds)}
    for step in steps.values():
        for _ in range(3):
            step()
    samples: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    timed: dict[str, list[float]] = {kind: [] for kind in kinds}   # the call times of --timer span or events
    for _ in range(reps):
        for kind, step in steps.items():   # one call each, under its own profiler
            samples[kind].append(kernel_times_us(step, 1, 60, warmup=0))
            if timer == "span":
                timed[kind].append(kernel_span_us(step))
            elif timer == "events":
                timed[kind].append(events_us(step, calls))
    flops = Config(head_dim, seqlen, causal).flops * (1.0 if forward else BWD_OVER_FWD)
    tag = f"hd{head_dim} s{seqlen} {'causal' if causal else 'none'}" + (f" ({timer})" if timer != "sum" else "")
    med: dict[str, float] = {}
    call_us = {kind: timed[kind] if timer != "sum" else [sum(r.values()) for r in runs]
               for kind, runs in samples.items()}
    for kind, runs in samples.items():
        totals = call_us[kind]
        med[kind] = statistics.median(totals)
        print(f"{tag} {kind}: median {med[kind]:.0f} us ({flops / med[kind] / 1e6:.0f} TFLOP/s), "
              f"min {min(totals):.0f}, max {max(totals):.0f}")
        names: dict[str, list[float]] = defaultdict(list)
        for r in runs:
            for name, us in r.items():
                names[name].append(us)
        for name, us in sorted(names.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"      {statistics.median(us):8.1f} us  {name}")
    a = kinds[0]
    for b in kinds[1:]:
        ratios = [x / y for x, y in zip(call_us[a], call_us[b], strict=True)]
        print(f"{tag}: {b} / {a} speed {med[a] / med[b]:.3f} (per repetition {min(ratios):.3f}-{max(ratios):.3f})")


def split_kinds(text: str) -> list[str]:
    """The comma-separated kinds, a comma inside braces or brackets (a dict or list literal) not separating."""
    kinds, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "{["
        depth -= ch in "}]"
        if ch == "," and depth == 0:
            kinds.append(cur)
            cur = ""
        else:
            cur += ch
    return [*kinds, cur]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="2048,8192,16384")
    ap.add_argument("--kinds", default="attngen,fa4",
                    help="comma-separated; attngen:<module>.<CONST>=<literal>;... builds attngen with family constants "
                         "overridden (an A/B in one process); a kind's '#deterministic' suffix its deterministic plan")
    ap.add_argument("--deterministic", action="store_true", help="attngen's deterministic plans (FA4 runs its default)")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--forward", action="store_true")
    ap.add_argument("--dtype", default="bf16", help="bf16, or fp8_e4m3 with --forward and attngen kinds only")
    ap.add_argument("--timer", choices=("sum", "span", "events"), default="sum",
                    help="a call's time: its kernels' device times summed, its first start to its last end, or CUDA "
                         "events around --calls calls back to back")
    ap.add_argument("--calls", type=int, default=10, help="calls between the events of --timer events")
    args = ap.parse_args()
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for mask in args.masks.split(","):
                one(d, s, mask == "causal", split_kinds(args.kinds), args.reps, args.forward, args.deterministic,
                    args.dtype, args.timer, args.calls)


if __name__ == "__main__":
    main()
