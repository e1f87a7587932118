"""The backward benchmark (`attngen bench --backward`): backward and forward+backward against the SDPA
flash (FlashAttention-2) and cuDNN backends and FlashAttention-4 (flash_attn.cute, where it imports), and
attngen's deterministic mode as a ratio to its default.

The forward benchmark's harness: its configurations (model.Config, FlashAttention-3 paper settings), its
timer (measure.time_ms) and its SDPA backends (peers.SDPA_BACKENDS); backward FLOPs = 2.5 x forward,
forward+backward 3.5 x. Every implementation's dQ is checked against float64 autograd (batch 0, heads
0-1) before it is timed. attngen's two plans (default and deterministic) carry their cost model's predicted time,
held against the measured backward time at every point (model.backward_model_row). Writes bwd.json and bwd.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .measure import time_ms, torch_dtype
from .model import BWD_OVER_FWD, Config, backward_model_row, grid
from .peers import SDPA_BACKENDS, fa4, first

PEERS = ("flash", "cudnn", "fa4")
#: attngen's implementations: the default plan and the deterministic one.
OURS = ("attngen", "attngen_deterministic")
#: dQ relative error a timed implementation must stay under (bf16 and fp16).
TOLERANCE = 2e-2


def _impl(kind: str, kernel: Any, causal: bool) -> Callable[..., Any]:
    """q, k, v (batch, seqlen, heads, head_dim) -> out, through attngen, FlashAttention-4 or one SDPA backend."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if kind.startswith("attngen"):
        return lambda q, k, v: kernel(q, k, v)
    if kind == "fa4":
        attend = fa4().flash_attn_func
        return lambda q, k, v: first(attend(q, k, v, causal=causal))
    backend = getattr(SDPBackend, SDPA_BACKENDS[kind])

    def run(q: Any, k: Any, v: Any) -> Any:
        with sdpa_kernel(backend):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)
    return run


def _dq_error(dq: Any, q: Any, k: Any, v: Any, dout: Any, causal: bool) -> float:
    import torch

    q64, k64, v64 = (t[:1, :, :2].double().detach().requires_grad_() for t in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q64, k64) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v64)
    (ref,) = torch.autograd.grad(out, (q64,), dout[:1, :, :2].double())
    got = dq[:1, :, :2].double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).norm() / ref.norm()).item()


def measure(kind: str, fwd: Callable[..., Any], q: Any, k: Any, v: Any, dout: Any, causal: bool,
            flops_fwd: float) -> dict[str, Any]:
    """Backward-only and forward+backward time of one implementation, after its dQ check."""
    import torch

    try:
        out = fwd(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        err = _dq_error(grads[0], q, k, v, dout, causal)
        if not err < TOLERANCE:
            return {"error": f"dq relative error {err:.2e} over {TOLERANCE}"}
        bwd_ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        both_ms = time_ms(lambda: torch.autograd.grad(fwd(q, k, v), (q, k, v), dout))
    except Exception as exc:  # a peer without a kernel for the shape is recorded, not fatal
        return {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}
    return {"bwd_ms": bwd_ms, "bwd_tflops": BWD_OVER_FWD * flops_fwd / bwd_ms / 1e9, "fwdbwd_ms": both_ms,
            "fwdbwd_tflops": (1 + BWD_OVER_FWD) * flops_fwd / both_ms / 1e9, "dq_rel_err": err}


def run(head_dims: Sequence[int], seqlens: Sequence[int], causal_modes: Sequence[bool], dtype: str,
        log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    kernels: dict[str, Any] = {}
    for cfg in grid(head_dims, seqlens, causal_modes):
        if kernels.get("key") != (cfg.head_dim, cfg.causal):
            kernels = {"key": (cfg.head_dim, cfg.causal), **_compile(cfg, dtype)}
        rows.append(_row(cfg, dtype, kernels))
        log(line(rows[-1]))
    return rows


def _compile(cfg: Config, dtype: str) -> dict[str, Any]:
    """attngen's kernel of the configuration, by default and deterministic, and their backward plans' summaries
    (under "plans", for the model) on this GPU's arch."""
    import attngen
    from attngen.planning.planner_bwd import plan_bwd
    from attngen.runtime.kernel import current_arch
    from attngen.spec.model import AttentionSpec

    spec = AttentionSpec.model_validate({"head_dim": cfg.head_dim, "dtype": dtype,
                                         "mask": "causal" if cfg.causal else "none"})
    det = spec.model_copy(update={"deterministic": True, "name": f"{spec.name}_det"})
    arch = current_arch()
    return {"attngen": attngen.compile(spec), "attngen_deterministic": attngen.compile(det),
            "plans": {"attngen": plan_bwd(spec, arch).summary(),
                      "attngen_deterministic": plan_bwd(det, arch).summary()}}


def _row(cfg: Config, dtype: str, kernels: dict[str, Any]) -> dict[str, Any]:
    """One configuration: fresh random inputs, each implementation checked, then timed."""
    import torch

    shape = (cfg.batch, cfg.seqlen, cfg.heads, cfg.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch_dtype(dtype), requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch_dtype(dtype))
    row: dict[str, Any] = {"head_dim": cfg.head_dim, "seqlen": cfg.seqlen, "causal": cfg.causal, "dtype": dtype}
    for kind in ("attngen", "attngen_deterministic", *PEERS):
        try:
            fwd = _impl(kind, kernels.get(kind), cfg.causal)
        except Exception as exc:  # a peer that does not import here is recorded, not fatal
            row[kind] = {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}
            continue
        row[kind] = measure(kind, fwd, q, k, v, dout, cfg.causal, cfg.flops)
    annotate(row, cfg, kernels.get("plans", {}))
    return row


def annotate(row: dict[str, Any], cfg: Config, plans: dict[str, Any]) -> None:
    """attngen's measured backward time (each of OURS that ran) beside its plan's model: row[kind]["model"]."""
    for kind in OURS:
        entry = row.get(kind, {})
        if kind in plans and "bwd_ms" in entry:
            entry["model"] = backward_model_row(cfg, plans[kind], entry["bwd_ms"])


def _model(row: dict[str, Any], kind: str, key: str) -> float:
    value = row.get(kind, {}).get("model", {}).get(key)
    return math.nan if value is None else float(value)


def _get(row: dict[str, Any], kind: str, key: str) -> float:
    return float(row.get(kind, {}).get(key, math.nan))


def line(row: dict[str, Any]) -> str:
    a = _get(row, "attngen", "bwd_tflops")
    det = _get(row, "attngen_deterministic", "bwd_tflops")
    peers = " ".join(f"{p} {_get(row, p, 'bwd_tflops'):.0f}" for p in PEERS)
    ratios = ", ".join(f"x{a / _get(row, p, 'bwd_tflops'):.2f} {p}" for p in PEERS)
    both = _get(row, "attngen", "fwdbwd_tflops") / _get(row, "flash", "fwdbwd_tflops")
    model = "; ".join(_model_text(row, kind) for kind in OURS)
    return (f"bwd hd{row['head_dim']} s{row['seqlen']} {'causal' if row['causal'] else 'full'}: attngen {a:.0f} "
            f"{peers} TFLOP/s, {ratios}; deterministic x{det / a:.2f}; fwd+bwd x{both:.2f} flash; {model}")


def _model_text(row: dict[str, Any], kind: str) -> str:
    """'attngen measured 900 us / model 880 us = 1.02' (nan where it did not run or has no model)."""
    measured, predicted = _model(row, kind, "measured_us"), _model(row, kind, "predicted_us_scaled")
    return (f"{kind.replace('attngen_', '')} measured {measured:.0f} us / model {predicted:.0f} us = "
            f"{_model(row, kind, 'measured_over_predicted'):.2f}")


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    """One row per configuration: backward TFLOP/s of attngen and each peer, attngen's ratio to each, the
    deterministic mode's ratio, then the same for forward+backward (NaN: the peer did not run; bwd.json says why),
    then each of attngen's plans' model (predicted µs scaled to the row) and measured / model."""
    def block(r: dict[str, Any], key: str) -> list[str]:
        a = _get(r, "attngen", key)
        return [f"{a:.0f}", *(f"{_get(r, p, key):.0f}" for p in PEERS), *(f"{a / _get(r, p, key):.2f}" for p in PEERS)]

    names = " | ".join(PEERS)
    ratios = " | ".join(f"x {p}" for p in PEERS)
    cols = 3 + 2 * (1 + 2 * len(PEERS)) + 1 + 2 * len(OURS)
    out = [header, "", "TFLOP/s (backward: 2.5 x forward FLOPs; forward+backward: 3.5 x) and attngen's ratios. "
           "'model µs': the backward plan's predicted time at its reference shape, scaled by FLOPs to the row's; "
           "'measured/model' > 1: slower than the cost model predicts.", "",
           f"| hd | seqlen | causal | bwd attngen | {names} | {ratios} | deterministic / default "
           f"| fwd+bwd attngen | {names} | {ratios} | model µs | measured/model | deterministic model µs "
           f"| deterministic measured/model |",
           "|" + "---|" * cols]
    for r in rows:
        det = _get(r, "attngen_deterministic", "bwd_tflops") / _get(r, "attngen", "bwd_tflops")
        cells = [str(r["head_dim"]), str(r["seqlen"]), "yes" if r["causal"] else "no", *block(r, "bwd_tflops"),
                 f"{det:.2f}", *block(r, "fwdbwd_tflops"),
                 *(f"{_model(r, kind, key):{fmt}}" for kind in OURS
                   for key, fmt in (("predicted_us_scaled", ".0f"), ("measured_over_predicted", ".2f")))]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def write(rows: list[dict[str, Any]], out: Path, environment: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bwd.json", out / "bwd.md"]
    paths[0].write_text(json.dumps({"environment": environment, "rows": rows}, indent=1))
    header = f"# attngen backward benchmark: {environment.get('gpu', '?')}\n\n{environment.get('line', '')}"
    paths[1].write_text(markdown(rows, header))
    return paths
