"""The variant axes of a spec: the mask, the score mod and the sinks (pydantic models).

A mask is a preset (`none`, `causal`, `sliding_window`, `chunked`, `prefix_lm`) or a boolean expression
over `b, h, q_idx, kv_idx, sq, sk` and declared runtime tensors and scalars; a score mod is a preset
(`softcap`, `alibi`) or a float expression that also sees `score`. Expressions are parsed and type-checked
here (attngen.expr) and stored in their canonical form, so two spellings of one expression are one spec.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from enum import Enum
from typing import Any, ClassVar, Literal

from pydantic import Field, StrictFloat, StrictInt, ValidationInfo, field_validator, model_validator

from .base import Frozen

#: Names a declared tensor or scalar may not take: the expression's own names and functions.
RESERVED = frozenset({"b", "h", "q_idx", "kv_idx", "sq", "sk", "score", "min", "max", "abs", "exp", "log", "tanh",
                      "sigmoid", "sqrt", "floor", "True", "False", "sinks", "alibi_slopes", "q", "k", "v"})
#: Symbolic tensor dims: each is a size of the call's q, k and v.
SHAPE_DIMS = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k")
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,31}$"


class MaskKind(str, Enum):
    none = "none"
    causal = "causal"
    #: {window: [left, right]} around the diagonal, -1 unbounded.
    sliding_window = "sliding_window"
    #: {chunk: C}: a query sees the keys of its own chunk of C positions, causally.
    chunked = "chunked"
    #: Bidirectional inside a per-sequence prefix (runtime int32 `prefix_len[batch]`), causal after it.
    prefix_lm = "prefix_lm"
    #: {expr: "...", tensors: {...}, scalars: {...}}: any boolean expression.
    expr = "expr"


class SinksKind(str, Enum):
    none = "none"
    #: A per-head logit `sinks[heads]` (fp32, a keyword argument of the kernel) joins each row's softmax
    #: denominator; its gradient is computed.
    learnable = "learnable"


class AlibiKind(str, Enum):
    #: The geometric slopes of the ALiBi paper (BLOOM's for head counts that are not powers of two).
    standard = "standard"
    #: Slopes passed per call: `alibi_slopes[heads]`, fp32.
    runtime = "runtime"


class TensorDecl(Frozen):
    """A runtime tensor an expression reads: `{dtype: int32, shape: [batch, seqlen_q]}`."""

    dtype: Literal["int32", "fp32"]
    shape: tuple[StrictInt | str, ...] = Field(min_length=1, max_length=4)

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: tuple[int | str, ...]) -> tuple[int | str, ...]:
        for dim in shape:
            if isinstance(dim, int) and not 1 <= dim <= 1 << 20:
                raise ValueError(f"a fixed dim must be from 1 to {1 << 20}, got {dim}")
            if isinstance(dim, str) and dim not in SHAPE_DIMS:
                raise ValueError(f"dim {dim!r} is not a size attngen knows; allowed: a positive integer or one of "
                                 f"{', '.join(SHAPE_DIMS)}")
        return shape


class ScalarDecl(Frozen):
    """A runtime scalar an expression reads: `{dtype: fp32}`."""

    dtype: Literal["int32", "fp32"]


class _Declares(Frozen):
    """An expression with the tensors and scalars it may read (declared first: `expr` is checked against them)."""

    tensors: dict[str, TensorDecl] = Field(default_factory=dict)
    scalars: dict[str, ScalarDecl] = Field(default_factory=dict)
    expr: str | None = Field(default=None, min_length=1, max_length=4096)
    _role: ClassVar[Literal["mask", "score_mod"]] = "mask"

    @field_validator("tensors", "scalars")
    @classmethod
    def _names(cls, decls: dict[str, Any]) -> dict[str, Any]:
        for name in decls:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not a usable name: letters, digits and '_', not starting with a digit")
            if name in RESERVED:
                raise ValueError(f"{name!r} is a name attngen uses itself; rename the declaration")
        return decls

    @field_validator("expr")
    @classmethod
    def _canonical(cls, source: str | None, info: ValidationInfo) -> str | None:
        """The expression parsed and type-checked against the declarations, in its canonical text."""
        if source is None:
            return None
        from .. import expr as lang

        tensors, scalars = info.data.get("tensors"), info.data.get("scalars")
        if tensors is None or scalars is None:
            return source  # a declaration is invalid; its own error shows
        both = set(tensors) & set(scalars)
        if both:
            raise ValueError(f"{sorted(both)[0]!r} is declared as a tensor and as a scalar; keep one")
        tree = lang.parse(source, role=cls._role, tensors=_expr_tensors(tensors), scalars=_expr_scalars(scalars))
        return lang.canonical(tree)

    @model_validator(mode="after")
    def _declared_for_an_expr(self) -> Any:
        if self.expr is None and (self.tensors or self.scalars):
            raise ValueError("'tensors' and 'scalars' declare what an 'expr' reads; this has no expr")
        return self

    def digest(self) -> str:
        """8 hex digits naming the canonical expression and its declarations."""
        text = json.dumps([self.expr, self.model_dump(mode="json", include={"tensors", "scalars"})], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def parsed(self) -> Any:
        """The expression's tree (attngen.expr), or None without one."""
        from .. import expr as lang

        if self.expr is None:
            return None
        return lang.parse(self.expr, role=self._role, tensors=_expr_tensors(self.tensors),
                          scalars=_expr_scalars(self.scalars))


def _expr_tensors(decls: dict[str, TensorDecl]) -> dict[str, Any]:
    from .. import expr as lang

    return {n: lang.TensorDecl(dtype=d.dtype, shape=tuple(d.shape)) for n, d in decls.items()}


def _expr_scalars(decls: dict[str, ScalarDecl]) -> dict[str, Any]:
    from .. import expr as lang

    return {n: lang.ScalarDecl(dtype=d.dtype) for n, d in decls.items()}


class Mask(_Declares):
    """`causal`, `{kind: sliding_window, window: [4095, 0]}`, `{kind: chunked, chunk: 8192}`,
    `{kind: prefix_lm}`, or `{expr: "...", tensors: {...}}`."""

    _spec_path: ClassVar[tuple[str, ...]] = ("mask",)
    kind: MaskKind = MaskKind.none
    window: tuple[StrictInt, StrictInt] | None = None
    chunk: StrictInt | None = Field(default=None, ge=1, le=1 << 24)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, (str, MaskKind)):
            return {"kind": data}
        if isinstance(data, dict) and "expr" in data and "kind" not in data:
            return {**data, "kind": MaskKind.expr}
        return data

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

    @model_validator(mode="after")
    def _fields_match_kind(self) -> Any:
        needs = {MaskKind.sliding_window: "window", MaskKind.chunked: "chunk", MaskKind.expr: "expr"}
        for kind, key in needs.items():
            given = getattr(self, key) is not None
            if self.kind is kind and not given and not (key == "window"):
                raise ValueError(f"mask '{kind.value}' needs '{key}'")
            if self.kind is not kind and given:
                raise ValueError(f"'{key}' applies only to mask '{kind.value}', not '{self.kind.value}'")
        return self

    @property
    def name_part(self) -> str:
        """The mask's part of spec and kernel names: `causal`, `window_128_0` (`inf` unbounded), `chunked_8192`,
        `prefix_lm`, `mask_<hash of the expression>`."""
        if self.kind is MaskKind.sliding_window and self.window is not None:
            left, right = ("inf" if side < 0 else str(side) for side in self.window)
            return f"window_{left}_{right}"
        if self.kind is MaskKind.chunked:
            return f"chunked_{self.chunk}"
        if self.kind is MaskKind.expr:
            return f"mask_{self.digest()}"
        return self.kind.value


class ScoreMod(_Declares):
    """`{softcap: 50.0}`, `{alibi: standard}` (or `runtime`), or `{expr: "...", tensors: {...}}`."""

    _spec_path: ClassVar[tuple[str, ...]] = ("score_mod",)
    _role: ClassVar[Literal["mask", "score_mod"]] = "score_mod"
    softcap: StrictFloat | StrictInt | None = None
    alibi: AlibiKind | None = None

    @field_validator("softcap")
    @classmethod
    def _cap(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and 0 < value <= 1e6):
            raise ValueError(f"softcap must be a positive finite number (Gemma 2 uses 50.0), got {value}")
        return None if value is None else float(value)

    @model_validator(mode="after")
    def _one_kind(self) -> Any:
        given = [key for key in ("softcap", "alibi", "expr") if getattr(self, key) is not None]
        if len(given) != 1:
            found = f"got {', '.join(given)}" if given else "got none"
            raise ValueError(f"a score_mod is exactly one of softcap, alibi or expr ({found}); write a combination "
                             f"as one expr, e.g. \"30.0 * tanh(score / 30.0) - slope * abs(q_idx - kv_idx)\"")
        return self

    @property
    def name_part(self) -> str:
        """The score mod's part of spec and kernel names: `softcap50`, `alibi`, `mod_<hash>`."""
        if self.softcap is not None:
            return f"softcap{self.softcap:g}".replace(".", "p")
        if self.alibi is not None:
            return "alibi" if self.alibi is AlibiKind.standard else "alibi_rt"
        return f"mod_{self.digest()}"
