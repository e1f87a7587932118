"""The attention spec: what a user asks for, validated by pydantic (frozen, unknown keys forbidden)."""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any, ClassVar

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import SpecError
from ..planning import search_space
from ..planning.search_space import HOPPER_ARCHS
from .base import Frozen as _Frozen
from .variant import Mask, MaskKind, ScoreMod, SinksKind

HEAD_DIMS: tuple[int, ...] = (64, 96, 128, 192, 256)
"""Head dims attngen ships: each one's kernels have passed the GPU suite against float64. The
templates take any multiple of 32 up to 256 (the swizzle atom); others join once verified on a GPU."""


class DType(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"
    #: 8-bit e4m3 q, k and v with fp32 descale factors, a bf16 output: forward only, mma.sync on sm89 and later.
    fp8_e4m3 = "fp8_e4m3"


class SeqlensKind(str, Enum):
    """How the kernel learns each batch entry's sequence lengths."""

    #: One seqlen_q and seqlen_k for the whole batch (dense (batch, seqlen, heads, head_dim) tensors).
    fixed = "fixed"
    #: Each entry's own lengths, read at run time: packed sequences (cu_seqlens, flash_attn's varlen) and a KV
    #: cache's used keys.
    varlen = "varlen"


class Arch(str, Enum):
    sm80 = "sm80"
    sm86 = "sm86"
    sm89 = "sm89"
    sm90 = "sm90"
    sm100 = "sm100"
    sm120 = "sm120"

    @classmethod
    def _missing_(cls, value: object) -> Arch:
        """'SM90' is sm90; anything else is a SpecError (a ValueError) with the allowed values."""
        if isinstance(value, str):
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        allowed = ", ".join(a.value for a in cls)
        raise SpecError(f"arch {value!r} is not supported; allowed: {allowed}. Remedy: name one of those "
                        f"(sm80 is the oldest generation attngen targets)")

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


MIN_STAGES, MAX_STAGES = 2, 5


class Pipeline(_Frozen):
    """`auto`, a strategy name, or `{kind: <strategy>, stages: N}`."""

    _spec_path: ClassVar[tuple[str, ...]] = ("pipeline",)
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
    """Optional tile overrides: values some pipeline's search space holds (search_space.SPACES); the
    spec checks them against its pipelines, the planner against the arch's budget."""

    _spec_path: ClassVar[tuple[str, ...]] = ("tiles",)

    block_m: StrictInt | None = Field(default=None, ge=16, le=256)
    block_n: StrictInt | None = Field(default=None, ge=16, le=256)
    num_warps: StrictInt | None = Field(default=None, ge=1, le=16)

    @field_validator("block_m", "block_n")
    @classmethod
    def _multiple_of_16(cls, value: int | None) -> int | None:
        if value is not None and value % 16:
            raise ValueError(f"must be a multiple of 16, got {value}")
        return value

    @field_validator("block_m", "block_n", "num_warps")
    @classmethod
    def _some_pipeline_tries(cls, value: int | None, info: ValidationInfo) -> int | None:
        field = info.field_name
        assert field is not None
        if value is not None and value not in search_space.all_values(field):
            outside = search_space.outside({field: value}, list(search_space.SPACES.values()))
            raise ValueError(f"{outside}. Remedy: pick one of those, or drop tiles.{field} and let the planner "
                             f"choose")
        return value


class AttentionSpec(_Frozen):
    """A declarative attention kernel: the single input of the whole pipeline."""

    name: str = Field(default="", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
    head_dim: StrictInt
    dtype: DType
    #: Which keys each query sees: a preset name, {kind: ..., window/chunk: ...} or {expr: ..., tensors: ...}.
    mask: Mask = Mask()
    #: The window of `mask: sliding_window` spelled at the top level; folded into `mask.window`.
    window: tuple[StrictInt, StrictInt] | None = None
    #: A function of the scaled logit before the softmax: {softcap: c}, {alibi: standard|runtime} or {expr: ...}.
    score_mod: ScoreMod | None = None
    #: `learnable`: a per-head logit joins each row's softmax denominator (gpt-oss).
    sinks: SinksKind = SinksKind.none
    arch: tuple[Arch, ...] | None = None
    pipeline: Pipeline = Pipeline()
    tiles: Tiles | None = None
    #: Bitwise-reproducible gradients: the backward kernels without floating-point atomics. The default
    #: may add dQ with TMA bulk reductions (the sm90 wgmma backward), whose rounding can vary by run.
    deterministic: StrictBool = False
    #: `varlen` builds the kernel for per-entry lengths (packed sequences, KV caches). A `fixed` spec's kernel
    #: builds its varlen twin on its first such call, so this is only needed to build that twin ahead of time.
    seqlens: SeqlensKind = SeqlensKind.fixed

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
    def _dtype_serves_the_spec(self) -> AttentionSpec:
        from .dtype_rules import dtype_refusal

        why = dtype_refusal(self)
        if why:
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _pipeline_matches_head_dim(self) -> AttentionSpec:
        kind, multiple = self.pipeline.kind, search_space.HOPPER_HEAD_DIM_MULTIPLE
        if kind.is_hopper and self.head_dim % multiple:
            raise ValueError(f"pipeline '{kind.value}' needs a head_dim that is a multiple of {multiple} (its "
                             f"128-byte swizzled TMA boxes hold 64 columns each); head_dim {self.head_dim} is not. "
                             f"Remedy: use pipeline 'auto' or 'multistage' for this head dim")
        return self

    @model_validator(mode="after")
    def _tiles_in_a_search_space(self) -> AttentionSpec:
        tiles = self.tiles.model_dump(exclude_none=True) if self.tiles else {}
        spaces, note = self._tile_spaces()
        outside = search_space.outside(tiles, spaces) if tiles else None
        if outside is None:
            return self
        usable = [s for s in self._auto_spaces()[0] if s not in spaces and s.holds(tiles)]
        remedy = "pick tiles from those values or drop the overrides (the planner then chooses)"
        if usable:
            names = " or ".join(f"'{s.pipeline}'{search_space.only_note(s)}" for s in usable)
            remedy = f"{remedy}; or use pipeline {names}, which tries these tiles"
        raise ValueError(f"{outside}{note}. Remedy: {remedy}")

    def _tile_spaces(self) -> tuple[list[search_space.Space], str]:
        """The search spaces of the pipelines this spec may plan with, and a note on how they were chosen."""
        kind = self.pipeline.kind
        if kind is PipelineKind.auto:
            return self._auto_spaces()
        return [search_space.SPACES[kind.value]], f" (the spec names pipeline '{kind.value}')"

    def _auto_spaces(self) -> tuple[list[search_space.Space], str]:
        """The search spaces of every pipeline `auto` may use for this spec, and a note on those left out."""
        why_not = self._why_no_hopper()
        if why_not:
            return [search_space.MULTISTAGE], f" (warp_specialized and pingpong do not apply: {why_not})"
        return list(search_space.SPACES.values()), ""

    def _why_no_hopper(self) -> str | None:
        """Why no Hopper pipeline can serve this spec on any arch it targets; None when one can."""
        multiple = search_space.HOPPER_HEAD_DIM_MULTIPLE
        if self.head_dim % multiple:
            return f"head_dim {self.head_dim} is not a multiple of {multiple}"
        if self.arch and not any(a.value in HOPPER_ARCHS for a in self.arch):
            return f"the spec's arch list ({', '.join(a.value for a in self.arch)}) has no {', '.join(HOPPER_ARCHS)}"
        return None

    @model_validator(mode="before")
    @classmethod
    def _fold_window(cls, data: Any) -> Any:
        """`mask: sliding_window` + a valid top-level `window` is `mask: {kind: sliding_window, window: ...}`
        (an invalid window stays where it is, so its error names the line it is on)."""
        if not isinstance(data, dict) or data.get("window") is None:
            return data
        mask, window = data.get("mask"), data["window"]
        kind = getattr(mask, "value", mask)
        valid = (isinstance(window, (list, tuple)) and len(window) == 2 and window != [-1, -1]
                 and tuple(window) != (-1, -1)
                 and all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window))
        if kind == MaskKind.sliding_window.value and valid:
            data = {k: v for k, v in data.items() if k != "window"}
            return {**data, "mask": {"kind": "sliding_window", "window": list(window)}}
        return data

    @model_validator(mode="after")
    def _window_matches_mask(self) -> AttentionSpec:
        if self.window is not None:
            raise ValueError(f"'window' applies only to mask 'sliding_window', not '{self.mask.kind.value}'")
        if self.mask.kind is MaskKind.sliding_window and self.mask.window is None:
            raise ValueError("mask 'sliding_window' needs 'window: [left, right]' (-1 for unbounded)")
        return self

    # ---- derived views -------------------------------------------------------------------
    def canonical_json(self) -> str:
        """Key order and spelling fixed: the spec's identity in cache keys and stamps."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def spec_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    @property
    def window_left(self) -> int:
        """Keys visible left of the diagonal for a window-shaped mask (none, causal, sliding_window); -1 unbounded."""
        return self._band()[0]

    @property
    def window_right(self) -> int:
        """Keys visible right of the diagonal for a window-shaped mask (causal is 0); -1 unbounded."""
        return self._band()[1]

    def _band(self) -> tuple[int, int]:
        kind = self.mask.kind
        if kind is MaskKind.sliding_window and self.mask.window is not None:
            return self.mask.window
        if kind in (MaskKind.none, MaskKind.causal):
            return (-1, 0 if kind is MaskKind.causal else -1)
        raise ValueError(f"mask '{kind.value}' is not a window around the diagonal")

    @property
    def is_plain(self) -> bool:
        """A window-shaped mask (none, causal, sliding_window), no score mod, no sinks."""
        window_shaped = self.mask.kind in (MaskKind.none, MaskKind.causal, MaskKind.sliding_window)
        return window_shaped and self.score_mod is None and self.sinks is SinksKind.none

    def with_seqlens(self, kind: SeqlensKind) -> AttentionSpec:
        """This spec with `seqlens: kind` (the name gains `_varlen` for a varlen twin of a fixed spec)."""
        if kind is self.seqlens:
            return self
        name = self.name + "_varlen" if kind is SeqlensKind.varlen else self.name.removesuffix("_varlen")
        return self.model_copy(update={"seqlens": kind, "name": name[:64]})

    def with_arch(self, arch: Arch) -> AttentionSpec:
        return self.model_copy(update={"arch": (arch,)})


def _derived_name(data: dict[str, Any]) -> str | None:
    """`<mask>[_<score mod>][_sinks]_<dtype>_hd<head_dim>` from valid raw values; None when they are not
    (their own errors show)."""
    dtype = getattr(data.get("dtype"), "value", data.get("dtype"))
    head_dim = data.get("head_dim")
    if not isinstance(dtype, str) or dtype not in DType._value2member_map_:
        return None
    if not isinstance(head_dim, int) or isinstance(head_dim, bool):
        return None
    raw_mask = data.get("mask", "none")
    if isinstance(raw_mask, (str, MaskKind)) and data.get("window") is not None:
        raw_mask = {"kind": raw_mask, "window": data["window"]}
    try:
        mask = raw_mask if isinstance(raw_mask, Mask) else Mask.pydantic_validate(raw_mask)
        mod = data.get("score_mod")
        mod = mod if mod is None or isinstance(mod, ScoreMod) else ScoreMod.pydantic_validate(mod)
        sinks = SinksKind(getattr(data.get("sinks"), "value", data.get("sinks", "none")))
    except (ValidationError, ValueError):
        return None
    parts = [mask.name_part]
    if mod is not None:
        parts.append(mod.name_part)
    if sinks is SinksKind.learnable:
        parts.append("sinks")
    return "_".join([*parts, dtype, f"hd{head_dim}"])
