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
import time
from collections.abc import Callable, Sequence
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
            "statistic": "median", "distribution": "log-uniform", "trust_seqlens": seqlens.TRUST_NOTE,
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
    for name, make in steps.items():
        row["impls"][name] = measure_step(make, packed, dout, spans, varlen_flops, name.startswith("attngen"))
    batch = seqlens.dense_batch(total)
    dense = [torch.randn(batch, seqlens.DENSE_SEQLEN, h, head_dim, device="cuda", dtype=dtype,
                         generator=gen).requires_grad_() for _ in range(3)]
    dense_dout = torch.randn_like(dense[0])
    row["dense_batch"], row["dense_flops"] = batch, seqlens.causal_flops([seqlens.DENSE_SEQLEN] * batch, head_dim, h)
    row["impls"]["attngen_dense"] = measure_step(lambda: _attngen_dense(kernel), dense, dense_dout,
                                                 [(0, seqlens.DENSE_SEQLEN)], row["dense_flops"], False)
    row["ratios"] = seqlens.varlen_ratios({n: e.get("tflops") for n, e in row["impls"].items()})
    return row


def _compile(head_dim: int, dtype: str) -> Any:
    import attngen
    from attngen.spec.model import AttentionSpec

    try:
        return attngen.compile(AttentionSpec.model_validate({"head_dim": head_dim, "dtype": dtype, "mask": "causal"}))
    except Exception as exc:  # recorded on the attngen entries; the peers still run
        return exc


def measure_step(make: Callable[[], Step], inputs: list[Any], dout: Any, spans: Sequence[tuple[int, int]],
                 flops: float, trusted: bool) -> dict[str, Any]:
    """Prepare, check out and gradients on `spans`, then time forward + backward (trusted: under
    ATTNGEN_TRUST_SEQLENS=1)."""
    import torch

    try:
        step = make()
        out = step(*inputs)
        grads = torch.autograd.grad(out, inputs, dout)
        errors = check(out, grads, inputs, dout, spans)
        worst = max(errors["out"], *(errors[g] for g in ("dq", "dk", "dv")))
        limit = max(TOLERANCE.values())
        if errors["out"] >= TOLERANCE["out"] or worst >= limit:
            return {"status": "wrong", "errors": errors, "error": f"relative error {worst:.2e}; not timed"}
        with seqlens.trusted_seqlens() if trusted else contextlib.nullcontext():
            ms = measure.time_ms(lambda: torch.autograd.grad(step(*inputs), inputs, dout))
    except Unavailable as exc:
        return {"status": "unavailable", "error": str(exc)}
    except Exception as exc:  # a peer that cannot run the step is recorded, not fatal
        return {"status": "error", "error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}
    return {"status": "ok", "ms": ms, "tflops": seqlens.tflops(flops, ms), "errors": errors}


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
