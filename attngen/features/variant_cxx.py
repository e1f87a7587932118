"""The values of the Variant<P> struct (templates/features/variant.cuh.j2), emitted from the expressions."""

from __future__ import annotations

from typing import Any

from ..spec.variant import TensorDecl
from .variant import CXX_DIMS, CXX_DTYPES, CXX_NAMES, SUMMARY_BLOCK, Variant

#: Unbounded ranges of each element type (for a tensor read over a box the summary cannot bound).
_UNBOUNDED = {"int": "-2147483648LL, 2147483647LL", "float": "-INFINITY, INFINITY"}
_RANGE_TYPES = {"int": "AgIRange", "float": "AgFRange"}


def variant_context(variant: Variant) -> dict[str, Any]:
    from .. import expr as lang

    names = dict(CXX_NAMES)
    for arg in variant.arguments():
        if not arg.is_tensor:
            names[arg.name] = f"p.var_{arg.name}"
    mask = variant.mask.parsed()
    band = variant.mask.band
    context: dict[str, Any] = {
        "summary_block": SUMMARY_BLOCK,
        "band": band is not None,
        "left": band[0] if band else -1,
        "right": band[1] if band else -1,
        "dense": not hides_keys(variant),
        "holes": not variant.mask.contiguous,
        "mask_per_head": mask is not None and "h" in lang.free_names(mask),
        "visible": "true" if mask is None else lang.emit(mask, names),
        "classify": _classify(mask, names),
        "sinks": variant.sinks is not None,
        "sink": "p.var_sinks[h]" if variant.sinks is not None else "0.f",
        "tensors": [],
        # A tensor indexed by the batch entry keeps the entry live across the loops: such kernels take the entry
        # from blockIdx.z (rematerialized for free), not from the packed entries' visiting order (a load, whose
        # register spilled 52 B in document_bf16_hd128's packed sm90 forward).
        "entry_tensors": indexes_entries(variant),
    }
    context.update(_score_mod(variant, names))
    for arg in variant.arguments():
        if isinstance(arg.decl, TensorDecl):
            ctype = CXX_DTYPES[arg.decl.dtype]
            dims = [str(d) if isinstance(d, int) else CXX_DIMS[d] for d in arg.decl.shape]
            context["tensors"].append({
                "name": arg.name, "dtype": arg.decl.dtype, "ctype": ctype, "dims": dims,
                "shape_text": ", ".join(map(str, arg.decl.shape)), "last": len(dims) - 1,
                "summarized": arg.summarized, "range_type": _RANGE_TYPES[ctype], "unbounded": _UNBOUNDED[ctype],
            })
    return context


def _classify(mask: Any, names: dict[str, str]) -> str:
    """The body of classify(q_lo, q_hi, kv_lo, kv_hi)."""
    if mask is None:
        return "    return kTileFull;"
    from .. import expr as lang

    return lang.emit_classify(mask, names, q=("q_lo", "q_hi"), kv=("kv_lo", "kv_hi"), indent=4)


def hides_keys(variant: Variant) -> bool:
    """Whether the mask hides any key (the kernels' Var::kDense is its negation)."""
    return variant.mask.parsed() is not None


def score_grad_is_const(variant: Variant) -> bool:
    """Whether the score mod's derivative is one constant (no score mod: 1): the backward's kScoreGradConst."""
    if variant.score_mod is None:
        return True
    from .. import expr as lang

    grad = variant.score_mod.derivative()
    return not lang.free_names(grad) and not lang.tensors_used(grad)


def _score_mod(variant: Variant, names: dict[str, str]) -> dict[str, Any]:
    trait = variant.score_mod
    if trait is None:
        return {"score_mod": False, "score": "score", "score_grad": "1.f", "grad_const": True, "grad_value": "1.f"}
    from .. import expr as lang

    tree = trait.parsed()
    grad = trait.derivative()
    constant = score_grad_is_const(variant)
    value = lang.evaluate(grad, {}) if constant else 1.0
    return {"score_mod": True, "score": lang.emit(tree, names), "score_grad": lang.emit(grad, names),
            "grad_const": constant, "grad_value": f"{float(value)!r}f"}


def indexes_entries(variant: Any) -> bool:
    """Whether a tensor of the variant is indexed by the batch entry (its kernels keep the 3-D grid's entry order:
    entry_tensors)."""
    return any(isinstance(a.decl, TensorDecl) and "batch" in a.decl.shape for a in variant.arguments())
