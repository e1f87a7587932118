"""Plan the decode kernels (short queries over a KV cache): the loop over the decode kernel families.

`plan_decode` asks the registry which decode families serve the spec on the arch (`families.serving`) and lets
the first plan. A decode plan fixes the tiles; the number of KV splits is chosen per call from the call's shape
(planning.splits.choose_splits), so the family also answers `splits` for a shape.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .. import families
from ..errors import PlanError
from ..families.base import Direction, KernelFamily
from ..spec.model import Arch, AttentionSpec
from .archs import arch_info
from .ir_decode import DecodePlan, DecodeRole

if TYPE_CHECKING:
    from ..toolchain.artifacts import KernelSource
    from .splits import RoleChoice, SplitChoice

#: The longest query (per sequence) a decode kernel serves: speculative decoding's drafts. Longer queries run
#: the forward kernels.
MAX_DECODE_QUERY = 16
#: Page sizes a paged cache may use (rows per block of the pool); the kernels size their table ring by the least.
PAGE_SIZES = range(16, 257, 16)
#: The allowed page sizes as errors name them.
PAGE_SIZES_TEXT = f"a multiple of {PAGE_SIZES.step} from {PAGE_SIZES.start} to {PAGE_SIZES[-1]}"


@dataclass(frozen=True)
class LaunchStep:
    """One kernel launch of a decode call: the entry point, its dynamic shared memory, grid and block, and
    whether it is a programmatic dependent launch (it starts while the launch before it runs and waits for that
    one's results itself)."""

    entry: str
    smem_bytes: int
    grid: tuple[int, int, int]
    threads: int
    dependent: bool = False


@dataclass(frozen=True)
class DecodeShape:
    """What a decode call's launches depend on: the batch, the query heads over the KV heads, the query rows per
    entry and the KV splits."""

    batch: int
    heads: int
    kv_heads: int
    seqlen_q: int
    num_splits: int


class DecodeFamily(KernelFamily):
    """A decode family: its plans of one spec on one arch (a stream tiling and, where the budget allows, a waves
    tiling of more blocks per SM), the tiling and split choice of a call, its sources (one cubin of the split and
    combine kernels per tiling) and their launches."""

    direction: ClassVar[Direction] = Direction.decode
    template: ClassVar[str]

    def render(self, plan: Any) -> KernelSource:
        from ..codegen.renderer import render_source

        return render_source(plan, self.template, self.context(plan), plan.entry_names)

    @abstractmethod
    def plan(self, spec: AttentionSpec, info: Any, exclude: Any = None,
             role: DecodeRole = DecodeRole.stream) -> DecodePlan:
        """The plan of `spec` of the tiling `role`; PlanError where the budget holds no such tiling."""

    @abstractmethod
    def splits(self, plan: DecodePlan, *, batch: int, kv_heads: int, heads: int, seqlen_q: int, keys: int,
               num_sms: int | None = None, dram_gbps: float | None = None, paged: bool = False) -> SplitChoice:
        """The KV splits a call of this shape (over a paged cache when `paged`) runs on a GPU of `num_sms` SMs and
        `dram_gbps` GB/s of DRAM bandwidth (defaults: the arch's flagship, archs.ArchInfo), and why."""

    @abstractmethod
    def role(self, plan: DecodePlan, *, batch: int, kv_heads: int, heads: int, seqlen_q: int, keys: int,
             num_sms: int | None = None) -> RoleChoice:
        """Which of the spec's tilings (DecodeRole) a call of this shape (`keys` the longest entry's) runs on a GPU
        of `num_sms` SMs, and why; `plan` is the stream plan."""

    @abstractmethod
    def explain_lines(self, plan: DecodePlan) -> list[str]:
        """What `explain` prints about the plan: tiles, budget, the split rule with examples."""

    @abstractmethod
    def steps(self, plan: DecodePlan, shape: DecodeShape) -> tuple[LaunchStep, ...]:
        """The launches of a call of `shape`, in order: the split kernel and, with more than one split, the
        combine kernel. Every launch reads the same parameter block (abi.DECODE_PARAMS and the variant's)."""


def decode_families() -> list[DecodeFamily]:
    return [cast(DecodeFamily, f) for f in families.registry() if f.direction is Direction.decode]


def decode_family(name: str) -> DecodeFamily:
    family = families.get(name)
    assert isinstance(family, DecodeFamily), f"{name} is not a decode family"
    return family


def plan_decode(spec: AttentionSpec, arch: Arch | str, role: DecodeRole = DecodeRole.stream) -> DecodePlan:
    """The decode plan of `spec` on `arch` (of the tiling `role`): the first serving decode family's; PlanError
    when none serves."""
    arch = Arch(arch)
    serving, refused = families.serving(spec, arch, Direction.decode)
    if not serving:
        raise PlanError(f"no decode kernel family serves spec '{spec.name}' on {arch.value}: "
                        + "; ".join(f"{n}: {why}" for n, why in refused.items())
                        + ". Remedy: KV-cache calls of this spec run the forward kernels")
    return cast(DecodePlan, cast(DecodeFamily, serving[0]).plan(spec, arch_info(arch), role=role))
