"""`attngen bench --varlen`: a packed training step (forward + backward) over documents of mixed lengths.

Documents log-uniform in [min, max] summing to the total tokens (fixed seed), causal per document; attngen's
varlen call (cu_seqlens) against attngen's dense causal step over the same total tokens (total / 8192 sequences
of 8192), torch's `torch.nn.attention.varlen.varlen_attn` (FlashAttention-2) and FlashAttention-4's
`flash_attn.cute.flash_attn_varlen_func` where they are importable. Each step's output and gradients are checked
against float32 autograd (the shortest and the longest document, or the first dense sequence; two heads) before
it is timed. FLOPs: 4 * n^2 * d * h / 2 per document, x3.5 for forward + backward.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import measure, peers, seqlens
from .peers import Unavailable
from .peers import first as _first
from .seqlens import VarlenOptions

Log = Callable[[str], None]
Step = Callable[..., Any]
REF_HEADS = 2
#: Relative error (L2) the output and each gradient may have and still be timed.
TOLERANCE = {"out": 2e-2, "grad": 3e-2}
#: Timing rounds: each implementation is timed once a round (do_bench's median), in turn, and reports the median of
#: its rounds. Timed one after the other instead, the same attngen and FlashAttention-4 steps read x0.95 and x0.99 in
#: two processes on the H100 (benchmarks/results/h100/seqlens/bench_7): the machine drifts between calls.
ROUNDS = 5
TIMING_NOTE = (f"{ROUNDS} rounds, each implementation timed once a round in turn (do_bench's median, L2 cleared); "
               "the median of the rounds")


@dataclass(frozen=True)
class Timed:
    """A checked step ready to time: the call, whether it runs under ATTNGEN_TRUST_SEQLENS=1, its FLOPs."""

    fn: Callable[[], Any]
    trusted: bool
    flops: float


def run(options: VarlenOptions, log: Log = print) -> tuple[Path, list[Path], float]:
    """One row per head dim; reports rewritten after each. Returns (folder, files, seconds)."""
    import torch

    from . import output, seqlens_report
    from .runner import BenchError

    if not torch.cuda.is_available():
        raise BenchError("the benchmark needs a CUDA GPU; torch sees none")
    started = time.perf_counter()
    env = measure.environment()
    target = options.out or output.default_folder(env["gpu"], seqlens.VARLEN_PREFIX)
    lengths = seqlens.doc_lengths(options.total_tokens, options.min_len, options.max_len, options.seed)
    results: dict[str, Any] = {"suite": "varlen", "environment": env, "settings": _settings(options),
                               "lengths": lengths, "rows": []}
    log(f"attngen bench --varlen on {env['gpu']} -> {target}; {len(lengths)} documents, "
        f"{min(lengths)}..{max(lengths)} tokens, {sum(lengths)} in all")
    paths: list[Path] = []
    for i, d in enumerate(options.head_dims):
        results["rows"].append(run_row(d, lengths, options, seed=i))
        log(seqlens_report.varlen_line(results["rows"][-1]))
        paths = seqlens_report.write_varlen(results, target, log=None)
        torch.cuda.empty_cache()
    paths = seqlens_report.write_varlen(results, target, log=log)
    return target, paths, time.perf_counter() - started


def _settings(options: VarlenOptions) -> dict[str, Any]:
    return {"head_dims": list(options.head_dims), "heads": options.heads, "total_tokens": options.total_tokens,
            "min_len": options.min_len, "max_len": options.max_len, "seed": options.seed, "dtype": options.dtype,
            "peers": list(options.peers), "dense_seqlen": seqlens.DENSE_SEQLEN, "timer": measure.timer_name(),
            "statistic": "median", "timing": TIMING_NOTE, "distribution": "log-uniform",
            "trust_seqlens": seqlens.TRUST_NOTE,
            "flops": "4 * n^2 * d * h / 2 per causal document, x3.5 for forward + backward",
            "check": f"float32 autograd, out and dq/dk/dv, first {REF_HEADS} heads of the shortest and longest "
                     "document (dense: the first sequence)"}


def run_row(head_dim: int, lengths: Sequence[int], options: VarlenOptions, seed: int) -> dict[str, Any]:
    """The varlen step of every implementation and attngen's dense step, each checked then timed."""
    import torch

    h, total, longest = options.heads, sum(lengths), max(lengths)
    dtype = measure.torch_dtype(options.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cu = torch.tensor([0, *torch.tensor(list(lengths)).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    packed = [torch.randn(total, h, head_dim, device="cuda", dtype=dtype, generator=gen).requires_grad_()
              for _ in range(3)]
    dout = torch.randn(total, h, head_dim, device="cuda", dtype=dtype, generator=gen)
    starts = cu.tolist()
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    spans = [(starts[i], starts[i + 1]) for i in dict.fromkeys((order[0], order[-1]))]
    kernel = _compile(head_dim, options.dtype)
    steps: dict[str, Callable[[], Step]] = {
        "attngen_varlen": lambda: _attngen_varlen(kernel, cu, longest)}
    for name in options.peers:
        steps[name] = (lambda: _torch_varlen(cu, longest)) if name == "flash" else (lambda: _fa4_varlen(cu, longest))
    varlen_flops = seqlens.causal_flops(lengths, head_dim, h)
    row: dict[str, Any] = {"head_dim": head_dim, "heads": h, "total": total, "docs": len(lengths),
                           "longest": longest, "flops": varlen_flops, "impls": {}}
    timed: dict[str, Timed] = {}
    for name, make in steps.items():
        row["impls"][name], fn = check_step(make, packed, dout, spans)
        if fn is not None:
            timed[name] = Timed(fn, name.startswith("attngen"), varlen_flops)
    batch = seqlens.dense_batch(total)
    dense = [torch.randn(batch, seqlens.DENSE_SEQLEN, h, head_dim, device="cuda", dtype=dtype,
                         generator=gen).requires_grad_() for _ in range(3)]
    dense_dout = torch.randn_like(dense[0])
    row["dense_batch"], row["dense_flops"] = batch, seqlens.causal_flops([seqlens.DENSE_SEQLEN] * batch, head_dim, h)
    row["impls"]["attngen_dense"], fn = check_step(lambda: _attngen_dense(kernel), dense, dense_dout,
                                                   [(0, seqlens.DENSE_SEQLEN)])
    if fn is not None:
        timed["attngen_dense"] = Timed(fn, False, row["dense_flops"])
    for name, entry in time_rounds(timed, ROUNDS).items():
        row["impls"][name].update(entry)
    row["ratios"] = seqlens.varlen_ratios({n: e.get("tflops") for n, e in row["impls"].items()})
    return row


def _compile(head_dim: int, dtype: str) -> Any:
    import attngen
    from attngen.spec.model import AttentionSpec

    try:
        return attngen.compile(AttentionSpec.model_validate({"head_dim": head_dim, "dtype": dtype, "mask": "causal"}))
    except Exception as exc:  # recorded on the attngen entries; the peers still run
        return exc


def check_step(make: Callable[[], Step], inputs: list[Any], dout: Any,
               spans: Sequence[tuple[int, int]]) -> tuple[dict[str, Any], Callable[[], Any] | None]:
    """Prepare the step and check out and gradients on `spans`: its entry, and the call to time (None where it
    cannot run or is wrong)."""
    import torch

    try:
        step = make()
        out = step(*inputs)
        grads = torch.autograd.grad(out, inputs, dout)
        errors = check(out, grads, inputs, dout, spans)
    except Unavailable as exc:
        return {"status": "unavailable", "error": str(exc)}, None
    except Exception as exc:  # a peer that cannot run the step is recorded, not fatal
        return _error(exc), None
    worst = max(errors["out"], *(errors[g] for g in ("dq", "dk", "dv")))
    if errors["out"] >= TOLERANCE["out"] or worst >= max(TOLERANCE.values()):
        return {"status": "wrong", "errors": errors, "error": f"relative error {worst:.2e}; not timed"}, None
    return {"status": "ok", "errors": errors}, lambda: torch.autograd.grad(step(*inputs), inputs, dout)


def time_rounds(timed: Mapping[str, Timed], rounds: int) -> dict[str, dict[str, Any]]:
    """Each step timed once a round, in turn, for `rounds` rounds (attngen's under ATTNGEN_TRUST_SEQLENS=1): its
    median ms, TFLOP/s and every round's ms; a step that fails while timed is recorded as an error."""
    times: dict[str, list[float]] = {name: [] for name in timed}
    failed: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, t in timed.items():
            if name in failed:
                continue
            try:
                with seqlens.trusted_seqlens() if t.trusted else contextlib.nullcontext():
                    times[name].append(measure.time_ms(t.fn))
            except Exception as exc:  # recorded on the entry, the others still timed
                failed[name] = _error(exc)
    out: dict[str, dict[str, Any]] = dict(failed)
    for name, ms_list in times.items():
        if name not in failed:
            ms = statistics.median(ms_list)
            out[name] = {"ms": ms, "tflops": seqlens.tflops(timed[name].flops, ms), "rounds_ms": ms_list}
    return out


def _error(exc: Exception) -> dict[str, Any]:
    """The entry of a step that raised: its exception's type and the start of its message."""
    return {"status": "error", "error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}


def check(out: Any, grads: Sequence[Any], inputs: Sequence[Any], dout: Any,
          spans: Sequence[tuple[int, int]]) -> dict[str, float]:
    """Relative L2 errors of out, dq, dk, dv against float32 causal autograd over the token spans (tokens
    flattened across the batch) and the first REF_HEADS heads."""
    import torch

    def flat(t: Any) -> Any:
        return t.detach().reshape(-1, *t.shape[-2:])[:, :REF_HEADS]

    got: dict[str, list[Any]] = {n: [] for n in ("out", "dq", "dk", "dv")}
    ref: dict[str, list[Any]] = {n: [] for n in got}
    for a, b in spans:
        q, k, v = (flat(t)[a:b].float().transpose(0, 1).requires_grad_() for t in inputs)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        rq = torch.autograd.grad(o, (q, k, v), flat(dout)[a:b].float().transpose(0, 1))
        for name, mine, theirs in zip(got, (out, *grads), (o, *rq), strict=True):
            mine_slice = flat(mine)[a:b].float().transpose(0, 1)
            got[name].append(mine_slice.flatten())
            ref[name].append(theirs.detach().flatten())
    return {n: measure.relative_error(torch.cat(got[n]), torch.cat(ref[n]).double()) for n in got}


def _attngen_varlen(kernel: Any, cu: Any, longest: int) -> Step:
    if isinstance(kernel, Exception):
        raise Unavailable(f"compile failed: {type(kernel).__name__}: {kernel}"[:300])
    return lambda q, k, v: kernel(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                  max_seqlen_k=longest)


def _attngen_dense(kernel: Any) -> Step:
    if isinstance(kernel, Exception):
        raise Unavailable(f"compile failed: {type(kernel).__name__}: {kernel}"[:300])
    return lambda q, k, v: kernel(q, k, v)


def _torch_varlen(cu: Any, longest: int) -> Step:
    """torch.nn.attention.varlen.varlen_attn, causal as its signature spells it: window_size=(-1, 0) (torch
    2.10 on) or is_causal=True (2.9)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as exc:
        raise Unavailable(f"this torch has no torch.nn.attention.varlen ({exc})") from None
    params = inspect.signature(varlen_attn).parameters
    if "window_size" in params:
        kw: dict[str, Any] = {"window_size": (-1, 0)}
    elif "is_causal" in params:
        kw = {"is_causal": True}
    else:
        raise Unavailable(f"varlen_attn{inspect.signature(varlen_attn)} takes no causal argument")
    return lambda q, k, v: _first(varlen_attn(q, k, v, cu, cu, longest, longest, **kw))


def _fa4_varlen(cu: Any, longest: int) -> Step:
    flash_attn_varlen_func = peers.fa4().flash_attn_varlen_func
    return lambda q, k, v: _first(flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                         max_seqlen_q=longest, max_seqlen_k=longest, causal=True))
