"""Ring or all-gather: the choice for a context-parallel call, with the arithmetic as its reason.

A ring step hides its transfer (one rank's K and V to the next rank) behind its compute (this rank's queries
against those keys) when the compute takes longer; each step also pays a fixed latency. All-gather pays one
collective up front and holds the whole K and V on every rank, and wins where the steps are too short to hide
their transfers: short contexts. The rates are data, each with its source; the choice is one function.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Strategy(str, Enum):
    auto = "auto"
    ring = "ring"
    all_gather = "all_gather"


@dataclass(frozen=True)
class Rates:
    """What the model assumes of the machine (override for other interconnects)."""

    #: Attention FLOP/s one GPU sustains on a shard pair: about 0.6 of the bf16 forward measured at 8k on the
    #: H100 (benchmarks/results/h100: 550-600 TFLOP/s forward, 400-480 backward), rounded down for short pairs.
    attention_flops: float = 350e12
    #: Point-to-point bytes/s between two GPUs of one host over NVLink 4 (H100/H200 SXM: 450 GB/s per direction
    #: nominal; NCCL's send/recv reaches about 70% of it).
    link_bytes: float = 300e9
    #: Fixed cost of one step's send/recv pair and its kernel launches (NCCL point-to-point latency plus the
    #: step's host work), seconds.
    step_latency: float = 30e-6
    #: The share of the whole K and V (fp32 dK/dV alike) a rank may hold for all-gather before the ring is
    #: preferred for memory (bytes): 8 GiB.
    gather_bytes: float = 8 * 2**30


@dataclass(frozen=True)
class CallShape:
    batch: int
    seqlen: int
    heads: int
    kv_heads: int
    head_dim: int
    elem_bytes: int
    #: The share of the score matrix the mask keeps (0.5 causal).
    density: float


@dataclass(frozen=True)
class CpPlan:
    strategy: Strategy
    reason: str
    step_compute_s: float
    step_transfer_s: float


def choose(world: int, shape: CallShape, wanted: Strategy = Strategy.auto, rates: Rates = Rates()) -> CpPlan:
    """Ring where a step's compute hides its transfer, all-gather otherwise (and where the gathered K and V fit)."""
    local = shape.seqlen // max(world, 1)
    flops = 4 * shape.batch * shape.heads * local * local * shape.head_dim * shape.density
    compute = flops / rates.attention_flops
    kv_bytes = 2 * shape.batch * local * shape.kv_heads * shape.head_dim * shape.elem_bytes
    transfer = kv_bytes / rates.link_bytes + rates.step_latency
    gathered = kv_bytes * world
    rate = rates.attention_flops / 1e12
    figures = (f"a step computes {compute * 1e6:.0f} us ({flops / 1e12:.2f} TFLOP at {rate:.0f} TFLOP/s) and sends "
               f"{kv_bytes / 2**20:.1f} MiB of K/V in {transfer * 1e6:.0f} us")
    if wanted is not Strategy.auto:
        return CpPlan(wanted, f"asked for {wanted.value}; {figures}", compute, transfer)
    if world == 1:
        return CpPlan(Strategy.ring, "one rank: no communication", compute, 0.0)
    if compute >= transfer:
        return CpPlan(Strategy.ring, f"ring: {figures}, so the transfer hides behind the compute", compute, transfer)
    if gathered > rates.gather_bytes:
        return CpPlan(Strategy.ring, f"ring: {figures} (not hidden), but all-gather would hold "
                      f"{gathered / 2**30:.1f} GiB of K/V per rank, over {rates.gather_bytes / 2**30:.0f} GiB",
                      compute, transfer)
    return CpPlan(Strategy.all_gather, f"all-gather: {figures}, too short to hide a transfer; one gather of "
                  f"{gathered / 2**20:.1f} MiB instead", compute, transfer)
