"""The specs a context-parallel call runs on each (query piece, key piece) pair, derived from the user's.

A pair sees the sequence through local indices: row i of the query piece is global position `q0 + i`, key j
of the key piece is `k0 + j`. Three derived specs cover every pair (none carries the sinks: a sink joins each
row's denominator once, in the merge, not once per pair):

- `offset`: the mask and the score mod rewritten over global positions (`q_idx` becomes `q_idx +
  cp_q_offset`, `kv_idx` becomes `kv_idx + cp_kv_offset`, `sq` and `sk` the global lengths, scalars given
  per call); a runtime tensor with a sequence dim is passed whole, so that dim is fixed to the global length.
  It is exact for every pair.
- `unmasked`: mask none with the score mod, for pairs whose every element is visible, when the score mod reads
  no position (with one that does, those pairs run `offset`).
- `band(q0, k0, ...)`: for window masks (none, causal, sliding windows) a pair is a window of the local
  indices, shifted; this gives that window's spec when its sides stay in range (the sm90 backward serves
  windows, not general expressions), else None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import expr as lang
from ..features.mask import mask_trait
from ..features.score_mod import ALIBI_SLOPES, score_mod_trait
from ..spec.model import AttentionSpec
from ..spec.variant import AlibiKind, MaskKind, SinksKind

Q_OFFSET, KV_OFFSET, SEQLEN_Q, SEQLEN_K = "cp_q_offset", "cp_kv_offset", "cp_seqlen_q", "cp_seqlen_k"
#: What the offset spec reads in place of each built-in name.
_GLOBAL_NAMES = {"sq": SEQLEN_Q, "sk": SEQLEN_K}
_OFFSETS = {"q_idx": Q_OFFSET, "kv_idx": KV_OFFSET}
_POSITIONS = frozenset({"q_idx", "kv_idx", "sq", "sk"})
#: A declared name attngen reserves is renamed in the offset spec (the caller's argument keeps its name).
_RENAMED = {ALIBI_SLOPES: "cp_alibi_slopes"}


def globalize(tree: lang.Expr) -> lang.Expr:
    """`tree` over global positions: q_idx + cp_q_offset, kv_idx + cp_kv_offset, the global lengths."""
    if isinstance(tree, lang.Var):
        if tree.name in _OFFSETS:
            return lang.Binary("+", tree, lang.Var(_OFFSETS[tree.name], lang.Ty.INT), lang.Ty.INT)
        if tree.name in _GLOBAL_NAMES:
            return lang.Var(_GLOBAL_NAMES[tree.name], lang.Ty.INT)
        return tree
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(tree):
        value = getattr(tree, f.name)
        if isinstance(value, tuple):
            changes[f.name] = tuple(globalize(x) for x in value)
        elif f.name not in ("ty", "op", "name", "fn", "value"):
            changes[f.name] = globalize(value)
    if isinstance(tree, lang.TensorRef):
        changes["name"] = _RENAMED.get(tree.name, tree.name)
    return dataclasses.replace(tree, **changes)


def _decls(tensors: Mapping[str, Any], seqlen_q: int, seqlen_k: int) -> dict[str, Any]:
    fixed = {"seqlen_q": seqlen_q, "seqlen_k": seqlen_k}
    return {_RENAMED.get(n, n): {"dtype": d.dtype, "shape": [fixed.get(x, x) for x in d.shape]}
            for n, d in tensors.items()}


def _offset_part(trait: Any, seqlen_q: int, seqlen_k: int) -> dict[str, Any] | None:
    if trait is None or trait.source is None:
        return None
    scalars = {n: {"dtype": d.dtype} for n, d in trait.scalars.items()}
    for name in (Q_OFFSET, KV_OFFSET, SEQLEN_Q, SEQLEN_K):
        if name in scalars or name in trait.tensors:
            raise ValueError(f"the spec declares '{name}', a name context-parallel attention uses itself; rename it")
        scalars[name] = {"dtype": "int32"}
    text = lang.canonical(globalize(trait.parsed()))
    return {"expr": text, "tensors": _decls(trait.tensors, seqlen_q, seqlen_k), "scalars": scalars}


@dataclass(frozen=True)
class ShardSpecs:
    """The derived specs of `spec` for a sequence of global lengths (seqlen_q, seqlen_k)."""

    spec: AttentionSpec
    seqlen_q: int
    seqlen_k: int
    offset: AttentionSpec = field(init=False)
    unmasked: AttentionSpec | None = field(init=False)
    #: The caller's runtime-argument name -> the offset spec's (ALiBi's slopes are renamed).
    renamed: Mapping[str, str] = field(init=False)
    #: The offset spec's tensors attngen fills itself (ALiBi's standard slopes), not the caller.
    computed: frozenset[str] = field(init=False)
    #: The user's mask parsed once (the host classifier reads it for every pair of every call), or None.
    mask_tree: Any = field(init=False)
    #: The spec's fields every derived spec keeps (no sinks, the window folded into the mask).
    _base: dict[str, Any] = field(init=False, repr=False)
    #: Window specs by their (left, right), built once each.
    _windows: dict[tuple[int, int], AttentionSpec] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        mod = score_mod_trait(self.spec)
        mask = mask_trait(self.spec)
        base = self.spec.model_dump(mode="json", exclude_none=True)
        base.update(sinks=SinksKind.none.value)
        base.pop("window", None)
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "mask_tree", mask.parsed())
        mask_part = _offset_part(mask, self.seqlen_q, self.seqlen_k)
        mod_part = _offset_part(mod, self.seqlen_q, self.seqlen_k)
        offset = {**base, "name": _name(self.spec, "cp"), "mask": mask_part or "none"}
        if mod_part is not None:
            offset["score_mod"] = mod_part
        object.__setattr__(self, "offset", AttentionSpec.model_validate(offset))
        positional = mod is not None and bool(lang.free_names(mod.parsed()) & _POSITIONS)
        unmasked = None if positional else AttentionSpec.model_validate(
            {**base, "name": _name(self.spec, "cp_full"), "mask": "none"})
        object.__setattr__(self, "unmasked", unmasked)
        names = set(mask.tensors) | set(mod.tensors if mod else {})
        object.__setattr__(self, "renamed", {n: _RENAMED.get(n, n) for n in names})
        standard = self.spec.score_mod is not None and self.spec.score_mod.alibi is AlibiKind.standard
        object.__setattr__(self, "computed", frozenset({_RENAMED[ALIBI_SLOPES]}) if standard else frozenset())

    @property
    def positional_mod(self) -> bool:
        return self.unmasked is None

    def band(self, q0: int, k0: int, local_q: int, local_k: int) -> AttentionSpec | None:
        """The window spec of the pair at global offsets (q0, k0) with local lengths, or None where the mask is
        no window, the score mod reads positions, or the shifted window leaves the range a spec can state."""
        window = mask_trait(self.spec).band
        if window is None or self.positional_mod or self.spec.mask.kind is MaskKind.expr:
            return None
        left, right = window
        # Global: key K sees query Q iff Q + SK - SQ - left <= K <= Q + SK - SQ + right. Locally the diagonal
        # is i + sk - sq, so the window moves by c.
        c = q0 - k0 + (self.seqlen_k - self.seqlen_q) - (local_k - local_q)
        left2 = left - c if left >= 0 else -1
        right2 = right + c if right >= 0 else -1
        if (left >= 0 and left2 < 0) or (right >= 0 and right2 < 0):
            return None
        if (left2, right2) == (-1, -1):
            return self.unmasked
        if (left2, right2) not in self._windows:
            mask: Any = "causal" if (left2, right2) == (-1, 0) else \
                {"kind": "sliding_window", "window": [left2, right2]}
            tag = f"cp_w{left2}_{right2}".replace("-1", "inf")
            self._windows[left2, right2] = AttentionSpec.model_validate(
                {**self._base, "name": _name(self.spec, tag), "mask": mask})
        return self._windows[left2, right2]

    def classify(self, q: tuple[int, int], kv: tuple[int, int], batch: int, heads: int,
                 tensor_bounds: Any = None, scalars: Mapping[str, float] | None = None) -> lang.TileClass:
        """EMPTY / PARTIAL / FULL of the global block q x kv (inclusive ranges), over every batch entry and head."""
        tree = self.mask_tree
        if tree is None:
            return lang.TileClass.FULL
        points: dict[str, Any] = {"b": lang.Interval(0, batch - 1), "h": lang.Interval(0, heads - 1),
                                  "sq": self.seqlen_q, "sk": self.seqlen_k, **(scalars or {})}
        return lang.classify(tree, q, kv, points, tensor_bounds)


def _name(spec: AttentionSpec, tag: str) -> str:
    return f"{spec.name[: 63 - len(tag)]}_{tag}"
