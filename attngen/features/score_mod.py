"""The score-mod and sinks traits: what happens to a visible logit before the softmax, and a per-head logit
that joins each row's softmax denominator.

A score mod is a float expression of the variant language over `score` (the scaled logit q.k x
softmax_scale), the indices and declared tensors; the presets are named expressions (`SCORE_MODS`). The
compiler derives its derivative with respect to `score` for the backward kernels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..spec.model import AttentionSpec
from ..spec.variant import AlibiKind, ScoreMod, SinksKind, TensorDecl

#: ALiBi's slopes tensor (given per call for `alibi: runtime`; computed by attngen for `standard`).
ALIBI_SLOPES = "alibi_slopes"
#: The sinks tensor, a keyword argument of the kernel: one fp32 logit per query head.
SINKS = "sinks"


@dataclass(frozen=True)
class ScoreModTrait:
    mod: ScoreMod
    source: str
    tensors: Mapping[str, TensorDecl] = field(default_factory=dict)
    scalars: Mapping[str, Any] = field(default_factory=dict)
    #: Tensors attngen computes itself from the call's shapes (ALiBi's standard slopes), not arguments.
    computed: frozenset[str] = frozenset()

    @property
    def name_part(self) -> str:
        return self.mod.name_part

    def parsed(self) -> Any:
        from .. import expr as lang
        from ..spec.variant import _expr_scalars, _expr_tensors

        return lang.parse(self.source, role="score_mod", tensors=_expr_tensors(dict(self.tensors)),
                          scalars=_expr_scalars(dict(self.scalars)))

    def derivative(self) -> Any:
        """d mod / d score, simplified (an expression tree)."""
        from .. import expr as lang

        return lang.simplify(lang.derivative(self.parsed(), "score"))


def score_mod_trait(spec: AttentionSpec) -> ScoreModTrait | None:
    mod = spec.score_mod
    if mod is None:
        return None
    if mod.softcap is not None:
        cap = repr(float(mod.softcap))
        return ScoreModTrait(mod, f"{cap} * tanh(score / {cap})")
    if mod.alibi is not None:
        slopes = {ALIBI_SLOPES: TensorDecl(dtype="fp32", shape=("heads",))}
        computed = frozenset({ALIBI_SLOPES}) if mod.alibi is AlibiKind.standard else frozenset()
        return ScoreModTrait(mod, f"score - {ALIBI_SLOPES}[h] * abs(q_idx + sk - sq - kv_idx)", tensors=slopes,
                             computed=computed)
    assert mod.expr is not None
    return ScoreModTrait(mod, mod.expr, tensors=dict(mod.tensors), scalars=dict(mod.scalars))


def alibi_slopes(heads: int) -> list[float]:
    """The ALiBi paper's slopes: 2^(-8 i / n) for n a power of two; otherwise those of the largest power of
    two below the head count, then every other slope of twice that count (BLOOM's rule)."""
    import math

    def powers(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]

    if heads & (heads - 1) == 0:
        return powers(heads)
    base = 1 << (heads.bit_length() - 1)
    return powers(base) + powers(2 * base)[0::2][: heads - base]


@dataclass(frozen=True)
class SinksTrait:
    """`sinks: learnable`: fp32 `sinks[heads]`, a keyword argument whose gradient the backward computes."""

    decl: TensorDecl = TensorDecl(dtype="fp32", shape=("heads",))
    name_part: str = "sinks"


def sinks_trait(spec: AttentionSpec) -> SinksTrait | None:
    return SinksTrait() if spec.sinks is SinksKind.learnable else None
