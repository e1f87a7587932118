"""What `attngen explain` reports about a spec on an arch, as data: the forward plan with every forward family's
verdict, the backward plan and the decode plan (or why the arch has none), and at a sequence length the share of
the forward's tiles the mask skips, masks and runs in full. `attngen.explain` returns it; the command line prints it
(views.print_explanation) or writes `to_json()`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PlanError
from ..spec.model import Arch, AttentionSpec

if TYPE_CHECKING:
    from .ir import KernelPlan


@dataclass(frozen=True)
class Explanation:
    """The forward plan and each forward family's verdict (name, why); `backward` and `decode` are their plans'
    summaries with their families' lines, or {"unavailable": why}; `tiles` the mask's tile shares at a length."""

    plan: KernelPlan
    families: tuple[tuple[str, str], ...]
    backward: dict[str, object]
    decode: dict[str, object]
    tiles: dict[str, Any] | None = None

    def to_json(self) -> dict[str, object]:
        """The chosen forward plan as JSON (`explain --json`): its summary, its predicted rate, the families'
        verdicts, the backward and decode summaries, and the tile shares when a length was given."""
        from .throughput import plan_rate

        out: dict[str, object] = {**self.plan.summary(), "predicted": plan_rate(self.plan),
                                  "families": dict(self.families), "backward": self.backward, "decode": self.decode}
        if self.tiles is not None:
            out["tiles"] = self.tiles
        return out


def explain(spec: AttentionSpec | str | os.PathLike[str], arch: Arch | str | None = None, *,
            seqlen: int | None = None) -> Explanation:
    """Plan `spec` (an AttentionSpec or a YAML path) on `arch` (default: the spec's first arch) and say why:
    PlanError when no forward family serves it there (the backward and the decode report their own refusals
    inside). `seqlen` adds the mask's tile shares at seqlen x seqlen."""
    from .planner import considered, plan

    if not isinstance(spec, AttentionSpec):
        from ..spec.loader import load_spec

        spec = load_spec(spec)
    if arch is None:
        if not spec.arch:
            allowed = ", ".join(a.value for a in Arch)
            raise ValueError(f"spec '{spec.name}' names no arch: pass arch= (one of {allowed})")
        arch = spec.arch[0]
    arch = Arch(arch)
    if seqlen is not None and seqlen < 1:
        raise ValueError(f"seqlen must be a positive length, got {seqlen}")
    kernel_plan = plan(spec, arch)
    return Explanation(plan=kernel_plan, families=tuple(considered(kernel_plan)),
                       backward=backward_summary(spec, arch), decode=decode_summary(spec, arch),
                       tiles=tile_shares(spec, kernel_plan, seqlen) if seqlen else None)


def tile_shares(spec: AttentionSpec, kernel_plan: KernelPlan, seqlen: int) -> dict[str, Any]:
    """The forward plan's tiles at seqlen x seqlen: the shares the mask's classifier skips (empty), masks
    (partial) and runs unmasked (full)."""
    from ..features.mask import mask_trait

    trait = mask_trait(spec)
    shares: dict[str, Any] = dict(trait.tile_shares(kernel_plan.block_m, kernel_plan.block_n, seqlen, seqlen))
    note = " (the mask reads tensors: counted with their values unknown)" if trait.tensors else ""
    return {**shares, "seqlen": seqlen, "block_m": kernel_plan.block_m, "block_n": kernel_plan.block_n,
            "note": note}


def backward_summary(spec: AttentionSpec, arch: Arch) -> dict[str, object]:
    """The backward plan (its family's), every backward family with why it was or was not chosen, and
    the family's lines about its kernels; or why the arch's budget cannot hold the backward."""
    from .planner_bwd import backward_family, considered_bwd, plan_bwd
    from .throughput import plan_rate

    try:
        bwd = plan_bwd(spec, arch)
    except PlanError as exc:
        return {"unavailable": str(exc)}
    return {**bwd.summary(), "predicted": plan_rate(bwd), "families": dict(considered_bwd(spec, arch)),
            "kernels": backward_family(bwd.family).explain_lines(bwd)}


def decode_summary(spec: AttentionSpec, arch: Arch) -> dict[str, object]:
    """The decode plan (KV-cache calls of at most 16 queries) with its family's lines (tiles, why, the split
    rule at example shapes), or why there is none."""
    from .planner_decode import decode_family, plan_decode

    try:
        dec = plan_decode(spec, arch)
    except PlanError as exc:
        return {"unavailable": str(exc)}
    return {**dec.summary(), "lines": decode_family(dec.family).explain_lines(dec)}
