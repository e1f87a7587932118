"""What the later stages produce: rendered source, then a compiled binary with its resource report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from ..spec.model import Arch, AttentionSpec


class Plan(Protocol):
    """What the plan of every kernel family has (planning.ir's KernelPlan, planning.ir_bwd's BwdPlan and HopperBwdPlan):
    what the cache, the compiler and the manifest read."""

    @property
    def spec(self) -> AttentionSpec: ...
    @property
    def arch(self) -> Arch: ...
    @property
    def family(self) -> str: ...
    @property
    def kernel_name(self) -> str: ...
    def summary(self) -> dict[str, object]: ...


PlanT = TypeVar("PlanT", bound=Plan, covariant=True)


@dataclass(frozen=True)
class KernelSource(Generic[PlanT]):
    """CUDA C++ rendered from one family's plan (stage 3); `plan` is that family's plan type."""

    plan: PlanT
    code: str
    #: extern "C" entry points, in launch order.
    entry_names: tuple[str, ...]
    #: sha256 (16 hex) of the plan's spec, stamped in the source header.
    spec_hash: str

    @property
    def filename(self) -> str:
        return f"{self.plan.kernel_name}.cu"


@dataclass(frozen=True)
class KernelResources:
    """One entry point's resource use, from ptxas's -v report."""

    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    smem_bytes: int
    stack_bytes: int = 0
    #: ptxas serialized its wgmmas for want of registers (advisory C7512): no spill, but one product at a time.
    wgmma_serialized: bool = False

    def as_manifest(self) -> dict[str, object]:
        return {"name": self.name, "registers": self.registers, "spill_stores": self.spill_stores,
                "spill_loads": self.spill_loads, "smem_bytes": self.smem_bytes, "stack_bytes": self.stack_bytes,
                "wgmma_serialized": self.wgmma_serialized}


@dataclass(frozen=True)
class Cubin:
    """NVRTC output for one KernelSource (stage 4)."""

    source: KernelSource
    data: bytes
    target: str
    nvrtc_version: str
    options: tuple[str, ...]
    resources: tuple[KernelResources, ...]
    log: str = ""
    cache_key: str = ""
    from_cache: bool = False
    extra: dict[str, object] = field(default_factory=dict)

    def resource(self, name: str) -> KernelResources:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)
