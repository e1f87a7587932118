"""What a plan's cost model promises, as a rate: the predicted TFLOP/s at the reference workload and its share of
the GPU generation's matmul ceiling for the plan's operand width (archs.MATMUL_CEILINGS, MATMUL_CEILINGS_8BIT).
`attngen explain` prints it and the bench holds the measurements against the same predicted times, so a model that
promises more than the ceiling shows it."""

from __future__ import annotations

from typing import Any

from ..features.dtype import dtype_trait
from ..spec.model import Arch
from .archs import matmul_ceiling
from .shared import REF_HIDDEN


def predicted_rate(arch: Arch, head_dim: int, flops: float, predicted_us: float, ref_seqlen: int,
                   bits: int = 16) -> dict[str, Any]:
    """A cost's FLOPs over its predicted time, the shape it is predicted at (batch 1, REF_HIDDEN / head_dim heads,
    `ref_seqlen` queries and keys), and that rate's share of `arch`'s matmul ceiling for `bits`-bit operands (with
    where the ceiling comes from)."""
    ceiling = matmul_ceiling(arch, bits)
    tflops = flops / predicted_us / 1e6
    return {"predicted_tflops": round(tflops, 1), "predicted_us": predicted_us, "arch": arch.value,
            "seqlen": ref_seqlen, "batch": 1, "heads": REF_HIDDEN // head_dim, "head_dim": head_dim,
            "ceiling_tflops": round(ceiling.tflops, 1), "ceiling_fraction": round(tflops / ceiling.tflops, 3),
            "ceiling_kind": ceiling.kind, "ceiling_bits": ceiling.bits, "ceiling_source": ceiling.source}


def plan_rate(plan: Any) -> dict[str, Any]:
    """`predicted_rate` of a forward or backward plan (a KernelPlan, BwdPlan or HopperBwdPlan: its cost's FLOPs,
    predicted time and reference seqlen)."""
    cost = plan.cost
    bits = 8 * dtype_trait(plan.spec.dtype).size
    return predicted_rate(plan.arch, plan.spec.head_dim, cost.flops, cost.predicted_us, cost.ref_seqlen, bits)


def rate_line(rate: dict[str, Any]) -> str:
    """'predicted: 803 TFLOP/s at seqlen 4096, batch 1 x 16 heads of 128 (1.06 of sm90's measured matmul ceiling
    760 TFLOP/s; ...)': a ceiling nobody measured says so, a rate above the ceiling says the model promises too
    much."""
    kind = "measured" if rate["ceiling_kind"] == "measured" else "vendor (not measured)"
    if rate["ceiling_bits"] == 8:
        kind += " 8-bit"
    over = "; above the ceiling: the cost model promises more than the GPU's matmul rate" \
        if rate["ceiling_fraction"] > 1 else ""
    return (f"predicted: {rate['predicted_tflops']:.0f} TFLOP/s at seqlen {rate['seqlen']}, batch {rate['batch']} x "
            f"{rate['heads']} heads of {rate['head_dim']} ({rate['ceiling_fraction']:.2f} of {rate['arch']}'s "
            f"{kind} matmul ceiling {rate['ceiling_tflops']:.0f} TFLOP/s{over})")
