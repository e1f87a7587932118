"""What a kernel family is: one direction (forward or backward) on one instruction path.

A family owns everything that differs between paths: which specs and arches it serves (or why not), its
tiling type and candidates, its budget and cost model, its template and template context, its parameter
block and its launches. The planner, `explain`, the renderer, the builder, the cache and the launchers
are loops over the registry (`attngen.families.registry`) and never ask which family they hold.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..planning.archs import ArchInfo
    from ..spec.model import Arch, AttentionSpec
    from ..toolchain.artifacts import KernelSource


class Direction(str, Enum):
    forward = "forward"
    backward = "backward"
    #: Short queries over a KV cache (split-KV): built beside the forward, used by KV-cache calls.
    decode = "decode"


@dataclass(frozen=True)
class Coverage:
    """What a family serves, as `attngen families` lists it (each a tuple of spec values). `dtypes`,
    `masks` and `kv_layouts` name the traits it serves (attngen/features/): `serves` refuses the others."""

    archs: tuple[str, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    masks: tuple[str, ...]
    kv_layouts: tuple[str, ...]
    pipelines: tuple[str, ...]
    #: Anything else a spec must satisfy, in words ("non-deterministic specs only").
    notes: str = ""


class KernelFamily(ABC):
    """One direction on one instruction path. Subclasses are stateless; the registry holds one of each."""

    #: The registry key and the name `explain` and manifests show ("sm80_fwd").
    name: ClassVar[str]
    direction: ClassVar[Direction]
    #: The instruction path in a few words ("mma.sync + cp.async").
    path: ClassVar[str]

    @abstractmethod
    def coverage(self) -> Coverage:
        """What this family serves (for `attngen families`; `serves` is the exact test)."""

    @abstractmethod
    def serves(self, spec: AttentionSpec, arch: Arch) -> str | None:
        """None when this family can build `spec` for `arch`; else why not, in words (`trait_refusal`
        first)."""

    def trait_refusal(self, spec: AttentionSpec) -> str | None:
        """Why this family does not serve the spec's element type, mask kind or KV layout (the traits its
        coverage lists), or None when it serves all three."""
        from ..features.kv_layout import kv_layout_trait

        cov = self.coverage()
        for axis, value, served in (("dtype", spec.dtype.value, cov.dtypes), ("mask", spec.mask.kind.value, cov.masks),
                                    ("kv layout", kv_layout_trait(spec).name, cov.kv_layouts)):
            if value not in served:
                return f"{axis} {value}: {self.name} serves {', '.join(served) or 'none'}"
        return None

    @abstractmethod
    def plan(self, spec: AttentionSpec, info: ArchInfo, exclude: Mapping[Any, str] | None = None) -> Any:
        """This family's plan of `spec` (its own plan type, carrying `family = self.name`); PlanError
        with the budget arithmetic when no candidate fits. `exclude` maps tilings found wanting (by the
        build's ptxas check) to the reason."""

    @abstractmethod
    def context(self, plan: Any) -> dict[str, object]:
        """Every value this family's template reads for `plan`."""

    @abstractmethod
    def render(self, plan: Any) -> KernelSource:
        """The CUDA source of `plan` (from this family's template)."""
