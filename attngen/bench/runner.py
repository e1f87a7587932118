"""The benchmark loop: ceilings, then per (head_dim, causal) one attngen compile, then per seqlen
fresh inputs, a float64 reference, and for each implementation a check and (if it passes) a timing.

A failure of one implementation is recorded with its reason and the run goes on. bench.json and
bench.md are rewritten after every config, so a run cut short still leaves what it measured.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import measure, model, output, report
from .model import Config
from .peers import AttngenImpl, Impl, Unavailable, compile_attngen, make_peers

if TYPE_CHECKING:
    import torch

Log = Callable[[str], None]
SCHEMA = 1
L2_NOTE = ("q, k and v are 64 MiB each at every setting (16k tokens x hidden 2048 x 2 bytes), past the "
           "50 MB L2; inputs are not rotated, and do_bench clears L2 before every timed run anyway")


class BenchError(Exception):
    """The benchmark cannot run at all here (no GPU)."""


@dataclass
class BenchOptions:
    head_dims: tuple[int, ...] = model.HEAD_DIMS
    seqlens: tuple[int, ...] | None = None
    causal: tuple[bool, ...] = (False, True)
    dtype: str = "bf16"
    peers: tuple[str, ...] = model.PEERS
    quick: bool = False
    out: Path | None = None
    budget_s: float | None = None
    seed: int = 0
    configs: list[Config] = field(default_factory=list)

    def grid(self) -> list[Config]:
        return self.configs or model.grid(self.head_dims, self.seqlens, self.causal, self.quick)


def run(options: BenchOptions, log: Log = print) -> tuple[dict[str, Any], Path]:
    """Run the benchmark; returns the results and the output folder (reports written there)."""
    import torch

    if not torch.cuda.is_available():
        raise BenchError("the benchmark needs a CUDA GPU; torch sees none")
    started = time.perf_counter()
    results = _header(options)
    out = options.out or output.default_folder(results["environment"]["gpu"])
    log(f"attngen bench on {results['environment']['gpu']} -> {out}")
    results["ceilings"] = measure.ceilings(options.dtype)
    c = results["ceilings"]
    log(f"ceilings: matmul {c['matmul_tflops']:.0f} TFLOP/s, copy {c['copy_gbps']:.0f} GB/s")
    peers = make_peers(options.peers)
    configs = options.grid()
    for head_dim, causal in model.group_keys(configs):
        attngen = _compile(head_dim, causal, options.dtype, results, log)
        for cfg in (c for c in configs if (c.head_dim, c.causal) == (head_dim, causal)):
            if options.budget_s is not None and time.perf_counter() - started > options.budget_s:
                results["skipped"].append({**cfg.as_dict(), "reason": f"time budget {options.budget_s:.0f} s spent"})
                continue
            seed = options.seed + len(results["results"]) + len(results["skipped"])
            results["results"].append(run_config(cfg, [attngen, *peers], results, seed, log))
            results["elapsed_s"] = time.perf_counter() - started
            report.write_partial(results, out)
    results["flex_dynamo_config"] = next((getattr(p, "dynamo_config", {}) for p in peers if p.name == "flex"), {})
    results["elapsed_s"] = time.perf_counter() - started
    return results, out


def _header(options: BenchOptions) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "environment": measure.environment(),
        "settings": {"dtype": options.dtype, "quick": options.quick, "peers": list(options.peers),
                     "tokens": model.TOKENS, "hidden": model.HIDDEN, "timer": measure.timer_name(),
                     "warmup_ms": measure.WARMUP_MS, "rep_ms": measure.REP_MS, "statistic": "median",
                     "tolerance": model.TOLERANCE[options.dtype], "reference_heads": measure.REF_HEADS,
                     "reference": "float64, batch element 0, first heads, every query row",
                     "l2": L2_NOTE},
        "ceilings": {}, "compile": [], "results": [], "skipped": [],
    }


def _compile(head_dim: int, causal: bool, dtype: str, results: dict[str, Any], log: Log) -> AttngenImpl:
    try:
        kernel, info = compile_attngen(head_dim, causal, dtype)
    except Exception as exc:  # recorded; the peers of this variant still run
        error = f"{type(exc).__name__}: {exc}"
        results["compile"].append({"head_dim": head_dim, "causal": causal, "error": error})
        log(f"attngen hd{head_dim} {'causal' if causal else 'full'}: compile FAILED: {error}")
        return AttngenImpl(None, error)
    results["compile"].append(info)
    log(f"attngen {info['spec']}: {model.tiling_label(info['plan'])}, cold compile {info['cold_compile_s']:.2f} s, "
        f"cache load {info['load_ms']:.1f} ms")
    return AttngenImpl(kernel)


def run_config(cfg: Config, impls: list[Impl], results: dict[str, Any], seed: int, log: Log) -> dict[str, Any]:
    """Every implementation on one config: check against the reference, then time."""
    import torch

    row: dict[str, Any] = {**cfg.as_dict(), "impls": {}}
    tol = results["settings"]["tolerance"]
    try:
        q, k, v = measure.make_inputs(cfg, results["settings"]["dtype"], seed)
        ref = measure.reference_slice(q, k, v, cfg.causal)
    except Exception as exc:  # out of memory, most likely: the whole config is recorded as failed
        row["error"] = f"inputs or reference: {type(exc).__name__}: {exc}"
        log(f"{cfg.label}: {row['error']}")
        torch.cuda.empty_cache()
        return row
    for impl in impls:
        entry = measure_impl(impl, cfg, (q, k, v), ref, tol)
        row["impls"][impl.name] = entry
        log(f"{cfg.label:24s} {impl.name:10s} {_describe(entry)}")
    del q, k, v, ref
    torch.cuda.empty_cache()
    _annotate(row, cfg, results)
    if row.get("model"):
        log(f"{cfg.label:24s} {'model':10s} {model.model_text(row['model'])}")
    return row


class _Failed(Exception):
    """One implementation failed; the message says why (with the warnings it raised)."""


def measure_impl(impl: Impl, cfg: Config, qkv: tuple[torch.Tensor, ...], ref: torch.Tensor,
                 tol: float) -> dict[str, Any]:
    """{'status': ok | failed | unavailable, ...}: the error, time and throughput of one implementation."""
    import torch

    try:
        forward, out, first_s = _first_call(impl, cfg, qkv)
        err = measure.relative_error(out[0, :, : ref.shape[1]], ref)
        del out
        if not err < tol:
            return {"status": "failed", "rel_err": err, "error": f"relative error {err:.3g} is not below {tol}"}
        ms = measure.time_ms(forward)
    except Unavailable as exc:
        return {"status": "unavailable", "error": str(exc)}
    except Exception as exc:  # any failure of one implementation is its result, not the run's end
        torch.cuda.empty_cache()
        text = str(exc) if isinstance(exc, _Failed) else f"{type(exc).__name__}: {exc}"
        return {"status": "failed", "error": text[:2000]}
    return {"status": "ok", "rel_err": err, "ms": ms, "tflops": model.tflops(cfg.flops, ms),
            "first_call_s": first_s}


def _first_call(impl: Impl, cfg: Config, qkv: tuple[torch.Tensor, ...]) -> tuple[Any, Any, float]:
    """Prepare and run once (compiles happen here): (forward, its output, seconds)."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            start = time.perf_counter()
            forward = impl.prepare(cfg, *qkv)
            out = forward()
            torch.cuda.synchronize()
            first_s = time.perf_counter() - start
        except Unavailable:
            raise
        except Exception as exc:
            notes = _warning_text(caught)
            raise _Failed(f"{type(exc).__name__}: {exc}" + (f" [warnings: {notes}]" if notes else "")) from exc
    notes = _warning_text(caught)
    if "unfused" in notes.lower():
        raise _Failed(f"ran its unfused fallback, not a compiled kernel: {notes}")
    return forward, out, first_s


def _warning_text(caught: list[warnings.WarningMessage]) -> str:
    return " | ".join(dict.fromkeys(str(w.message).strip() for w in caught))[:1500]


def _annotate(row: dict[str, Any], cfg: Config, results: dict[str, Any]) -> None:
    """Ratios attngen / peer, and the plan's model beside attngen's measurement."""
    ours = row["impls"].get("attngen", {}).get("tflops")
    row["ratios"] = {name: model.ratio(ours, e.get("tflops")) for name, e in row["impls"].items()
                     if name != "attngen"}
    info = next((c for c in results["compile"] if (c["head_dim"], c["causal"]) == (cfg.head_dim, cfg.causal)
                 and "plan" in c), None)
    if info is not None and results["ceilings"]:
        row["model"] = model.model_row(cfg, info["plan"], row["impls"].get("attngen", {}).get("ms"),
                                       results["ceilings"])


def _describe(entry: dict[str, Any]) -> str:
    if entry["status"] == "ok":
        return f"{entry['tflops']:7.1f} TFLOP/s  {entry['ms']:.3f} ms  err {entry['rel_err']:.1e}"
    return f"{entry['status'].upper()}: {entry.get('error', '')}"[:300]
