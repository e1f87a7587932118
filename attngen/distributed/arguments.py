"""A context-parallel call's arguments checked, and its runtime arguments sorted for the shard kernels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..features.mask import mask_trait
from ..features.score_mod import SINKS
from ..features.variant import variant_of
from ..runtime.checks import softmax_scale_of
from ..spec.model import AttentionSpec
from .shard_specs import ShardSpecs

if TYPE_CHECKING:
    import torch

_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def check_shards(spec: AttentionSpec, q: Any, k: Any, v: Any, softmax_scale: float | None, backend: str) -> float:
    """q (batch, local_q, heads, d), k and v (batch, local_k, kv_heads, d) as the spec and backend take them; the
    softmax scale to use."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, local_seqlen, heads, head_dim), got shape {tuple(t.shape)}")
        if t.shape[-1] != spec.head_dim:
            raise ValueError(f"{name}'s head_dim is {t.shape[-1]}; spec '{spec.name}' has head_dim {spec.head_dim}")
        if backend == "compiled" and (t.dtype != getattr(torch, _DTYPES[spec.dtype.value]) or not t.is_cuda):
            raise ValueError(f"{name} must be a CUDA tensor of {_DTYPES[spec.dtype.value]} (spec '{spec.name}'), got "
                             f"{t.dtype} on {t.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype or not q.device == k.device == v.device:
        raise ValueError("q, k and v must share a dtype and a device")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have one batch size, got {q.shape[0]} and {k.shape[0]}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"q's heads ({q.shape[2]}) must be a multiple of k's and v's kv_heads ({k.shape[2]})")
    return softmax_scale_of(softmax_scale, spec.head_dim)


@dataclass
class Arguments:
    """Runtime arguments as the shard kernels take them (under the offset spec's names), the sinks (merged, not
    passed), and what the host classifier knows of the mask's tensors and scalars."""

    tensors: dict[str, Any] = field(default_factory=dict)
    scalars: dict[str, float] = field(default_factory=dict)
    sinks: torch.Tensor | None = None
    bounds: Any = None
    mask_scalars: dict[str, float] = field(default_factory=dict)


def split_arguments(spec: AttentionSpec, specs: ShardSpecs, given: Mapping[str, Any], q: Any) -> Arguments:
    import torch

    wanted = {a.name: a for a in variant_of(spec).arguments() if not a.computed}
    unknown = sorted(set(given) - set(wanted))
    missing = sorted(set(wanted) - set(given))
    if unknown or missing:
        listing = ", ".join(sorted(wanted)) or "none"
        raise ValueError(f"spec '{spec.name}' takes the keyword arguments: {listing}; missing {missing or 'none'}, "
                         f"unexpected {unknown or 'none'} (tensors that index positions are passed whole, over "
                         f"the global sequence)")
    parts = Arguments()
    mask = mask_trait(spec)
    arrays = {}
    for name, value in given.items():
        if name == SINKS:
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (q.shape[2],):
                raise ValueError(f"sinks must be a float tensor of shape ({q.shape[2]},) (one logit per query head)")
            parts.sinks = value.to(q.device)
        elif wanted[name].is_tensor:
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
            parts.tensors[specs.renamed.get(name, name)] = value.to(q.device)
            if name in mask.tensors:
                arrays[name] = value.detach().cpu().numpy()
        else:
            parts.scalars[name] = value
            if name in mask.scalars:
                parts.mask_scalars[name] = value
    if arrays:
        from .. import expr as lang

        parts.bounds = lang.tensor_bounds_from_arrays(arrays)
    return parts
