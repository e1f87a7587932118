"""The attention spec: what a user asks for, validated by pydantic (frozen, unknown keys forbidden)."""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

HEAD_DIMS: tuple[int, ...] = (64, 96, 128, 192, 256)
"""Head dims attngen ships: each one's kernels have passed the GPU suite against float64. The
templates take any multiple of 32 up to 256 (the swizzle atom); others join once verified on a GPU."""


class DType(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"

    @property
    def itemsize(self) -> int:
        return 2


class MaskKind(str, Enum):
    none = "none"
    causal = "causal"
    sliding_window = "sliding_window"


class Arch(str, Enum):
    sm80 = "sm80"
    sm86 = "sm86"
    sm89 = "sm89"
    sm90 = "sm90"
    sm100 = "sm100"
    sm120 = "sm120"

    @property
    def capability(self) -> tuple[int, int]:
        digits = self.value[2:]
        return int(digits[:-1]), int(digits[-1])

    @classmethod
    def from_capability(cls, major: int, minor: int) -> Arch:
        name = f"sm{major}{minor}"
        try:
            return cls(name)
        except ValueError:
            allowed = ", ".join(a.value for a in cls)
            raise ValueError(f"GPU compute capability {major}.{minor} ({name}) is not supported; "
                             f"attngen targets {allowed}") from None


class PipelineKind(str, Enum):
    auto = "auto"
    #: mma.sync tensor cores fed by a cp.async ring: every arch.
    multistage = "multistage"
    #: A TMA producer warpgroup and wgmma consumer warpgroups: sm90 only.
    warp_specialized = "warp_specialized"
    #: warp_specialized with two consumer warpgroups taking turns at the tensor cores: sm90 only.
    pingpong = "pingpong"

    @property
    def is_hopper(self) -> bool:
        return self in (PipelineKind.warp_specialized, PipelineKind.pingpong)


#: The arches each Hopper strategy compiles for (wgmma and TMA are sm_90a instructions).
HOPPER_ARCHS: tuple[str, ...] = ("sm90",)

MIN_STAGES, MAX_STAGES = 2, 5


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class Pipeline(_Frozen):
    """`auto`, a strategy name, or `{kind: <strategy>, stages: N}`."""

    kind: PipelineKind = PipelineKind.auto
    stages: StrictInt | None = Field(default=None, ge=MIN_STAGES, le=MAX_STAGES)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"kind": data}
        return data

    @model_validator(mode="after")
    def _stages_need_a_strategy(self) -> Pipeline:
        if self.stages is not None and self.kind is PipelineKind.auto:
            raise ValueError("'stages' needs a named strategy (multistage, warp_specialized or pingpong), not 'auto'")
        return self


class Tiles(_Frozen):
    """Optional tile overrides; the planner checks them against the arch's budget."""

    block_m: StrictInt | None = Field(default=None, ge=16, le=256)
    block_n: StrictInt | None = Field(default=None, ge=16, le=256)
    num_warps: StrictInt | None = Field(default=None, ge=1, le=16)

    @field_validator("block_m", "block_n")
    @classmethod
    def _multiple_of_16(cls, value: int | None) -> int | None:
        if value is not None and value % 16:
            raise ValueError(f"must be a multiple of 16, got {value}")
        return value

    @field_validator("num_warps")
    @classmethod
    def _power_of_two(cls, value: int | None) -> int | None:
        if value is not None and value not in (1, 2, 4, 8, 12, 16):
            raise ValueError(f"must be one of 1, 2, 4, 8, 12, 16, got {value}")
        return value


class AttentionSpec(_Frozen):
    """A declarative attention kernel: the single input of the whole pipeline."""

    name: str = Field(default="", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
    head_dim: StrictInt
    dtype: DType
    mask: MaskKind = MaskKind.none
    window: tuple[StrictInt, StrictInt] | None = None
    arch: tuple[Arch, ...] | None = None
    pipeline: Pipeline = Pipeline()
    tiles: Tiles | None = None
    #: Bitwise-reproducible gradients: the backward kernels without floating-point atomics. The default
    #: may add dQ with TMA bulk reductions (the sm90 wgmma backward), whose rounding can vary by run.
    deterministic: StrictBool = False

    @field_validator("head_dim")
    @classmethod
    def _head_dim(cls, value: int) -> int:
        if value not in HEAD_DIMS:
            allowed = ", ".join(map(str, HEAD_DIMS))
            raise ValueError(f"head_dim {value} is not supported; allowed: {allowed}")
        return value

    @field_validator("arch", mode="before")
    @classmethod
    def _arch_list(cls, value: Any) -> Any:
        if isinstance(value, (str, Arch)):
            return (value,)
        if isinstance(value, list) and not value:
            raise ValueError("an empty arch list targets nothing; name at least one arch or omit 'arch'")
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is None:
            return value
        for side in value:
            if side < -1:
                raise ValueError(f"window sides must be >= 0, or -1 for unbounded; got {list(value)}")
        if value == (-1, -1):
            raise ValueError("window [-1, -1] masks nothing; use mask: none")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("name") in (None, ""):
            derived = _derived_name(data)
            if derived is not None:
                data = {**data, "name": derived}
        return data

    @model_validator(mode="after")
    def _pipeline_matches_arch(self) -> AttentionSpec:
        kind = self.pipeline.kind
        if kind.is_hopper and self.arch:
            others = [a.value for a in self.arch if a.value not in HOPPER_ARCHS]
            if others:
                raise ValueError(f"pipeline '{kind.value}' runs on {', '.join(HOPPER_ARCHS)} only (wgmma and TMA "
                                 f"of sm_90a); arch lists {', '.join(others)}. Use pipeline 'auto' or 'multistage' "
                                 f"for those, or a separate spec per arch")
        return self

    @model_validator(mode="after")
    def _window_matches_mask(self) -> AttentionSpec:
        if self.mask is MaskKind.sliding_window and self.window is None:
            raise ValueError("mask 'sliding_window' needs 'window: [left, right]' (-1 for unbounded)")
        if self.mask is not MaskKind.sliding_window and self.window is not None:
            raise ValueError(f"'window' applies only to mask 'sliding_window', not '{self.mask.value}'")
        return self

    # ---- derived views -------------------------------------------------------------------
    def canonical_json(self) -> str:
        """Key order and spelling fixed: the spec's identity in cache keys and stamps."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def spec_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    @property
    def window_left(self) -> int:
        """Keys visible to the left of the diagonal (-1: unbounded)."""
        if self.mask is MaskKind.sliding_window:
            assert self.window is not None
            return self.window[0]
        return -1

    @property
    def window_right(self) -> int:
        """Keys visible to the right of the diagonal (-1: unbounded; causal is 0)."""
        if self.mask is MaskKind.sliding_window:
            assert self.window is not None
            return self.window[1]
        return 0 if self.mask is MaskKind.causal else -1

    def with_arch(self, arch: Arch) -> AttentionSpec:
        return self.model_copy(update={"arch": (arch,)})


def _derived_name(data: dict[str, Any]) -> str | None:
    """`<mask>_<dtype>_hd<head_dim>` from valid raw values; None when they are not (their own errors show)."""
    mask = getattr(data.get("mask", "none"), "value", data.get("mask", "none"))
    dtype = getattr(data.get("dtype"), "value", data.get("dtype"))
    head_dim = data.get("head_dim")
    if not isinstance(mask, str) or not isinstance(dtype, str):
        return None
    if mask not in MaskKind._value2member_map_ or dtype not in DType._value2member_map_:
        return None
    if not isinstance(head_dim, int) or isinstance(head_dim, bool):
        return None
    window = data.get("window")
    if mask == MaskKind.sliding_window.value and isinstance(window, (list, tuple)) and len(window) == 2:
        left, right = ("inf" if w == -1 else str(w) for w in window)
        return f"window_{left}_{right}_{dtype}_hd{head_dim}"
    return f"{mask}_{dtype}_hd{head_dim}"
