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

    #: Attention FLOP/s one GPU sustains on a shard pair, forward and backward: below the 476-505 TFLOP/s of
    #: fwd+bwd measured at 128k on an H200 (results/h200x2/cp_1), for the shorter pairs of larger groups.
    attention_flops: float = 350e12
    #: Point-to-point bytes/s between two GPUs of one host over NVLink 4 (H100/H200 SXM: 450 GB/s per direction
    #: nominal; the ring's shifts measured 3 GiB in 9.6 ms, 335 GB/s, on two H200s: results/h200x2/cp_1).
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


@dataclass(frozen=True)
class RingStep:
    """One ring step of a call, forward and backward: compute, bytes sent, and their times under `Rates`."""

    world: int
    seqlen: int
    fwd_compute_s: float
    fwd_bytes: float
    bwd_compute_s: float
    bwd_bytes: float
    rates: Rates

    @property
    def fwd_transfer_s(self) -> float:
        return self.fwd_bytes / self.rates.link_bytes + self.rates.step_latency

    @property
    def bwd_transfer_s(self) -> float:
        return self.bwd_bytes / self.rates.link_bytes + self.rates.step_latency

    @property
    def hidden(self) -> bool:
        return self.fwd_compute_s >= self.fwd_transfer_s and self.bwd_compute_s >= self.bwd_transfer_s

    @property
    def call_s(self) -> float:
        """The predicted fwd+bwd time: W steps of the longer of compute and transfer, and the last dK/dV hop."""
        steps = max(self.fwd_compute_s, self.fwd_transfer_s) + max(self.bwd_compute_s, self.bwd_transfer_s)
        return self.world * steps + (self.bwd_bytes * 2 / 3) / self.rates.link_bytes


def ring_step(world: int, shape: CallShape, rates: Rates = Rates()) -> RingStep:
    """The model of one ring step: a rank's queries against one rank's keys (the mask's share of them; zigzag
    evens it out), K and V sent forward; in the backward 2.5x the FLOPs, K and V plus fp32 dK and dV sent."""
    local = shape.seqlen // world
    flops = 4 * shape.batch * shape.heads * local * local * shape.head_dim * shape.density
    kv = 2 * shape.batch * local * shape.kv_heads * shape.head_dim * shape.elem_bytes
    return RingStep(world, shape.seqlen, flops / rates.attention_flops, kv, 2.5 * flops / rates.attention_flops,
                    kv + kv * 4 / shape.elem_bytes, rates)
