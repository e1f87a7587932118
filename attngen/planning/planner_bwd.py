"""Plan the backward pass: the loop over the backward kernel families.

`plan_bwd` asks the registry which backward families serve the spec on the arch
(`families.serving`) and lets the first plan (FAMILIES' order: the faster path first; sm90_bwd where it
serves, sm80_bwd everywhere else). A family whose budget turns out not to hold the spec hands on to the
next with its reason. The budgets and cost models live in the families (`attngen/families/sm80_bwd.py`,
`sm90_bwd.py`); `BackwardFamily` is what they share: the plan, the source and the launch of one
family's kernels.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .. import families
from ..errors import PlanError
from ..families.base import Direction, KernelFamily
from ..spec.model import Arch, AttentionSpec
from .archs import ArchInfo, arch_info
from .ir_bwd import BwdCost, BwdPlan, HopperBwdPlan
from .shared import BWD_FLOPS_OVER_FWD, REF_HIDDEN, REF_SEQLEN, ref_forward_flops

if TYPE_CHECKING:

    from ..toolchain.artifacts import KernelSource

#: What a backward family plans.
BackwardPlan = BwdPlan | HopperBwdPlan
#: (entry point, dynamic shared memory bytes) -> the loaded kernel function.
LoadFunction = Callable[[str, int], Any]


class BackwardFamily(KernelFamily):
    """A backward family: its plan of one spec on one arch, the source of its kernels (one cubin) and
    their launches."""

    direction: ClassVar[Direction] = Direction.backward
    #: Its top-level Jinja2 template (templates/).
    template: ClassVar[str]

    @abstractmethod
    def plan(self, spec: AttentionSpec, info: ArchInfo, exclude: Mapping[Any, str] | None = None) -> Any:
        """This family's plan of `spec` (family = self.name); PlanError with the arithmetic when its
        budget cannot hold it."""

    @abstractmethod
    def context(self, plan: Any) -> dict[str, object]:
        """Every value the family's template reads."""

    def render(self, plan: Any) -> KernelSource:
        from ..codegen.renderer import render_source

        return render_source(plan, self.template, self.context(plan), plan.entry_names)

    def explain_lines(self, plan: Any) -> list[str]:
        """What `explain` prints about the plan (its kernels and tiles), one line each."""
        return []

    @abstractmethod
    def prepare(self, plan: Any, function: LoadFunction, call: Any) -> Any:
        """The family's launches for calls like `call` (a runtime.backward.BwdCall), with everything that depends
        only on its geometry (runtime.prepared.CallGeometry) done: an object whose `run(call, stream)` queues the
        kernels of a call of that geometry on `stream` and returns dq, dk, dv. `function` loads an entry point of
        the family's cubin."""


def backward_cost(spec: AttentionSpec, info: ArchInfo, kernels: list[tuple[str, float]],
                  matrix_flops_per_clk: int) -> BwdCost:
    """A backward plan's cost: its useful FLOPs (BWD_FLOPS_OVER_FWD x the forward's at the reference workload)
    and its kernels' predicted times (us, in launch order), which add up to the predicted time;
    `matrix_flops_per_clk` is the family's matrix rate per SM (the arch table's)."""
    flops = BWD_FLOPS_OVER_FWD * ref_forward_flops(spec)
    t_mma = flops / (matrix_flops_per_clk * info.num_sms_hint * info.clock_ghz * 1e3)
    total = sum(us for _, us in kernels)
    return BwdCost(ref_seqlen=REF_SEQLEN, flops=int(flops), t_mma_us=round(t_mma, 2),
                   kernels=tuple((name, round(us, 2)) for name, us in kernels), efficiency=round(t_mma / total, 3),
                   predicted_us=round(total, 2))


def preprocess_us(spec: AttentionSpec, info: ArchInfo) -> float:
    """The preprocess kernel at the reference workload: it reads O and dO once and writes D = rowsum(dO * O),
    one fp32 per row, at the arch's DRAM bandwidth."""
    from ..features.dtype import dtype_trait

    rows = REF_HIDDEN // spec.head_dim * REF_SEQLEN
    return rows * (2 * spec.head_dim * dtype_trait(spec.dtype).size + 4) / (info.hbm_gbps * 1e3)


def wave_efficiency(info: ArchInfo, blocks: int, resident: int) -> float:
    """The share of the SMs' block slots (`resident` blocks per SM) that `blocks` blocks keep busy over their
    waves (the forward's tile_efficiency)."""
    from .splits import wave_efficiency as busy_share

    return busy_share(blocks, max(1, resident) * info.num_sms_hint)


def backward_families() -> list[BackwardFamily]:
    """The backward families, in FAMILIES' order."""
    return [cast(BackwardFamily, f) for f in families.registry() if f.direction is Direction.backward]


def backward_family(name: str) -> BackwardFamily:
    """The backward family `name` (a backward plan's `family`)."""
    family = families.get(name)
    assert isinstance(family, BackwardFamily), f"{name} is not a backward family"
    return family


def choose_bwd(spec: AttentionSpec, arch: Arch | str) -> tuple[BackwardPlan, dict[str, str]]:
    """The plan of the first serving backward family whose budget holds the spec, and for every other
    backward family why it does not plan it."""
    arch = Arch(arch)
    info = arch_info(arch)
    serving, others = families.serving(spec, arch, Direction.backward)
    chosen: BackwardPlan | None = None
    error: PlanError | None = None
    for family in serving:
        if chosen is not None:
            others[family.name] = f"serves the spec, but {chosen.family} comes before it in FAMILIES' order"
            continue
        try:
            chosen = family.plan(spec, info)
        except PlanError as exc:
            others[family.name] = f"serves the spec, but its budget cannot hold it: {str(exc).splitlines()[0]}"
            error = exc  # the last family's (the general path's) budget explains the failure
    if chosen is None:
        if error is not None:
            raise error
        raise PlanError(f"no backward kernel family serves spec '{spec.name}' on {arch.value}: "
                        + "; ".join(f"{n}: {why}" for n, why in others.items()))
    return chosen, others


def plan_bwd(spec: AttentionSpec, arch: Arch | str) -> BackwardPlan:
    """The backward plan of `spec` on `arch`: one family's (see `choose_bwd`); PlanError when none fits."""
    return choose_bwd(spec, arch)[0]


def considered_bwd(spec: AttentionSpec, arch: Arch | str) -> list[tuple[str, str]]:
    """Every backward family with what became of it (explain's list): the chosen one, the others' reasons."""
    chosen, others = choose_bwd(spec, arch)
    out = []
    for family in backward_families():
        if family.name == chosen.family:
            out.append((family.name, f"chosen ({family.path}): the first backward family in FAMILIES' order "
                                     f"that serves the spec"))
        else:
            out.append((family.name, others.get(family.name, "not considered")))
    return out
