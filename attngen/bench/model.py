"""The benchmark's settings grid and arithmetic: FLOPs, the compulsory bytes, the roofline bound. Pure Python.

Settings are the FlashAttention-3 paper's: 16k tokens per batch (batch = 16384 // seqlen) and a
hidden size of 2048 (heads = 2048 // head_dim); FLOPs = 4 * b * h * s * s * d, halved for causal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..planning.shared import BWD_FLOPS_OVER_FWD
from ..spec.model import Arch

SEQLENS: tuple[int, ...] = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS: tuple[int, ...] = (64, 128, 256)
TOKENS = 16384
HIDDEN = 2048
#: `--quick`: head dim -> seqlens (both causal modes of each).
QUICK: dict[int, tuple[int, ...]] = {64: (2048, 8192), 128: (2048, 8192, 16384), 256: (2048, 8192)}
PEERS: tuple[str, ...] = ("flash", "cudnn", "efficient", "flex", "fa4")
IMPLS: tuple[str, ...] = ("attngen", *PEERS)
#: Largest relative error (float64 reference, L2 norm) an output may have and still be timed.
TOLERANCE: dict[str, float] = {"bf16": 2e-2, "fp16": 1e-2}
ELEM_BYTES = 2
#: Backward FLOPs over forward (five products against two), as the planner counts them.
BWD_OVER_FWD = BWD_FLOPS_OVER_FWD


@dataclass(frozen=True)
class Config:
    """One benchmark point."""

    head_dim: int
    seqlen: int
    causal: bool

    @property
    def batch(self) -> int:
        return max(1, TOKENS // self.seqlen)

    @property
    def heads(self) -> int:
        return max(1, HIDDEN // self.head_dim)

    @property
    def flops(self) -> float:
        return attention_flops(self.batch, self.heads, self.seqlen, self.seqlen, self.head_dim, self.causal)

    @property
    def label(self) -> str:
        return f"hd{self.head_dim} s{self.seqlen} {'causal' if self.causal else 'full'}"

    def as_dict(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim, "seqlen": self.seqlen, "causal": self.causal,
                "batch": self.batch, "heads": self.heads, "flops": self.flops}


def attention_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int, causal: bool) -> float:
    """Forward FLOPs: two matmuls of 2 * sq * sk * d each per (batch, head); half of them under causal."""
    return 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim * (0.5 if causal else 1.0)


def compulsory_bytes(batch: int, heads: int, seqlen: int, head_dim: int, elem: int = ELEM_BYTES) -> float:
    """HBM bytes no forward can avoid: Q, K and V read once and O written once, per (batch, head). The roofline's
    memory side counts only these: a kernel that re-reads K and V for every query block gets the re-reads from L2,
    so counting them as HBM traffic (the IO model this replaced) put the bound above the measured time ('of bound'
    1.33-1.59 at hd128 in benchmarks/results/h100/model_1)."""
    return float(batch * heads * 4 * seqlen * head_dim * elem)


def roofline_us(flops: float, hbm_bytes: float, matmul_tflops: float, copy_gbps: float) -> tuple[float, str]:
    """The lower bound on time (us) from the measured matmul rate and copy bandwidth, and which bound it is."""
    compute = flops / (matmul_tflops * 1e12) * 1e6
    memory = hbm_bytes / (copy_gbps * 1e9) * 1e6
    return (compute, "compute") if compute >= memory else (memory, "memory")


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """attngen / peer throughput (> 1: attngen is faster); None when either is missing."""
    if not ours or not theirs or not math.isfinite(ours) or not math.isfinite(theirs):
        return None
    return ours / theirs


def grid(head_dims: Sequence[int], seqlens: Sequence[int] | None, causal_modes: Sequence[bool],
         quick: bool = False) -> list[Config]:
    """Configs grouped by (head_dim, causal), seqlens ascending. `seqlens` None: all, or QUICK's."""
    out: list[Config] = []
    for d in head_dims:
        lengths = seqlens if seqlens is not None else (QUICK.get(d, ()) if quick else SEQLENS)
        for causal in causal_modes:
            out.extend(Config(d, s, causal) for s in sorted(set(lengths)))
    return out


def model_row(cfg: Config, plan: Mapping[str, Any], measured_ms: float | None,
              ceilings: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's model beside the measurement of one config (plan: KernelPlan.summary())."""
    io = compulsory_bytes(cfg.batch, cfg.heads, cfg.seqlen, cfg.head_dim)
    bound, bound_by = roofline_us(cfg.flops, io, ceilings["matmul_tflops"], ceilings["copy_gbps"])
    cost = plan["cost"]
    predicted = forward_prediction(cfg, plan)
    measured = measured_ms * 1e3 if measured_ms else None
    return {
        "tiling": tiling_label(plan),
        "flops": cfg.flops,
        "io_bytes": io,
        "arithmetic_intensity": cfg.flops / io,
        "bound_us": bound,
        "bound_by": bound_by,
        "measured_us": measured,
        "achieved_fraction": bound / measured if measured else None,
        "plan_cost": dict(cost),
        "predicted_us_scaled": predicted,
        "measured_over_predicted": measured / predicted if measured and predicted else None,
    }


def scaled_prediction(cost: Mapping[str, Any], flops: float) -> float | None:
    """A plan cost's predicted time (us, at its reference shape) scaled by FLOPs to `flops`; None without FLOPs."""
    return cost["predicted_us"] * flops / cost["flops"] if cost.get("flops") else None


def forward_prediction(cfg: Config, plan: Mapping[str, Any]) -> float | None:
    """A forward plan's predicted time at `cfg`: its time at the reference shape scaled by FLOPs, and by the share of
    the SMs its blocks keep busy there over the share at `cfg` (the reference shape, batch 1 at seqlen 4096, has a
    quarter of the bench's 16k tokens: hd64's 192-row blocks fill 0.89 of their waves there, 0.97-0.99 here)."""
    from ..planning.archs import arch_info
    from ..planning.splits import wave_efficiency

    cost = plan["cost"]
    scaled = scaled_prediction(cost, cfg.flops)
    if scaled is None or not cost.get("tile_efficiency"):
        return scaled
    blocks = -(-cfg.seqlen // int(plan["block_m"])) * cfg.heads * cfg.batch
    slots = max(1, int(cost.get("blocks_per_sm") or 1)) * arch_info(Arch(plan["arch"])).num_sms_hint
    return scaled * cost["tile_efficiency"] / wave_efficiency(blocks, slots)


def backward_model_row(cfg: Config, plan: Mapping[str, Any], measured_ms: float | None) -> dict[str, Any]:
    """A backward plan's model beside the measured backward time of one config (plan: a backward plan's summary(),
    with its cost): the predicted time scaled by FLOPs to this shape, its TFLOP/s and measured / predicted."""
    cost = plan["cost"]
    flops = BWD_OVER_FWD * cfg.flops
    predicted = scaled_prediction(cost, flops)
    measured = measured_ms * 1e3 if measured_ms else None
    return {
        "family": plan.get("family"),
        "flops": flops,
        "plan_cost": dict(cost),
        "predicted_us_scaled": predicted,
        "predicted_tflops": flops / predicted / 1e6 if predicted else None,
        "measured_us": measured,
        "measured_over_predicted": measured / predicted if measured and predicted else None,
    }


def model_text(m: Mapping[str, Any]) -> str:
    """A model row as the bench prints it for every point: 'measured 1200 us, model 950 us (scaled from the plan's
    reference shape), measured/model 1.26'; '-' where a figure is missing."""
    def us(value: float | None) -> str:
        return f"{value:.0f} us" if value else "-"

    ratio = m.get("measured_over_predicted")
    return (f"measured {us(m.get('measured_us'))}, model {us(m.get('predicted_us_scaled'))} (scaled from the plan's "
            f"reference shape), measured/model {f'{ratio:.2f}' if ratio else '-'}")


def tiling_label(plan: Mapping[str, Any]) -> str:
    roles = plan.get("roles")
    extra = (f" {plan['pipeline']}{' overlap' if roles['intra_wg_overlap'] else ''}" if roles
             else f"{' qreg' if plan.get('q_in_regs') else ''}")
    return f"{plan['block_m']}x{plan['block_n']} w{plan['num_warps']} s{plan['stages']}{extra}"


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; 'NVIDIA GeForce RTX 4090' -> 'rtx4090'; '' -> 'gpu'."""
    words = [w for w in re.findall(r"[a-z0-9]+", name.lower()) if w not in ("nvidia", "geforce", "tesla")]
    if not words:
        return "gpu"
    if words[0] in ("rtx", "gtx", "quadro") and len(words) > 1:
        return words[0] + words[1]
    return words[0]


def parse_seqlen(text: str) -> int:
    """'2048', '2k' or '2K' -> 2048."""
    text = text.strip().lower()
    value = int(text[:-1]) * 1024 if text.endswith("k") else int(text)
    if value <= 0:
        raise ValueError(f"a seqlen must be positive, got {text!r}")
    return value


def parse_ints(text: str, parse: Any = int) -> tuple[int, ...]:
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise ValueError("an empty list")
    return tuple(dict.fromkeys(parse(item) for item in items))


def parse_causal(text: str) -> tuple[bool, ...]:
    modes = {"both": (False, True), "yes": (True,), "no": (False,), "true": (True,), "false": (False,)}
    try:
        return modes[text.strip().lower()]
    except KeyError:
        raise ValueError(f"must be both, yes or no; got {text!r}") from None


def parse_peers(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    unknown = [n for n in names if n not in PEERS and n != "none"]
    if unknown:
        raise ValueError(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)} (or none)")
    return tuple(n for n in names if n != "none")


def seqlen_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def group_keys(configs: Iterable[Config]) -> list[tuple[int, bool]]:
    return list(dict.fromkeys((c.head_dim, c.causal) for c in configs))
