"""References the kernels are tested against: float64 attention of any spec (variant.py), the block schedule
(schedule.py) and NumPy interpreters of the forward and backward tile loops (interp.py, interp_bwd.py).

The package is itself callable: `attngen.reference(spec, q, k, v, **tensors)` returns float64 (out, lse) of
the spec (its mask, score mod and sinks) and `attngen.reference.grads(spec, q, k, v, dout, **tensors)` the
float64 gradients (dq, dk, dv and dsinks).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _ReferenceModule(types.ModuleType):
    def __call__(self, spec: Any, q: Any, k: Any, v: Any, *, softmax_scale: float | None = None,
                 **tensors: Any) -> Any:
        """Float64 (out, lse) of `spec` (an AttentionSpec or a YAML path) on q, k, v and its runtime tensors."""
        from .variant import attention

        return attention(_spec(spec), q, k, v, softmax_scale=softmax_scale, **tensors)

    def grads(self, spec: Any, q: Any, k: Any, v: Any, dout: Any, *, softmax_scale: float | None = None,
              dlse: Any = None, **tensors: Any) -> Any:
        """Float64 gradients {dq, dk, dv[, dsinks]} of sum(out * dout) (+ sum(lse * dlse))."""
        from .variant import grads

        return grads(_spec(spec), q, k, v, dout, softmax_scale=softmax_scale, dlse=dlse, **tensors)


    def varlen(self, spec: Any, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *,
               softmax_scale: float | None = None, **tensors: Any) -> Any:
        """Float64 (out (total_q, heads, d), lse (heads, total_q)) of packed sequences, each attended alone."""
        from .packed import attention_packed

        return attention_packed(_spec(spec), q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale=softmax_scale,
                                **tensors)

    def varlen_grads(self, spec: Any, q: Any, k: Any, v: Any, dout: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *,
                     softmax_scale: float | None = None, **tensors: Any) -> Any:
        """Float64 gradients {dq, dk, dv[, dsinks]} of packed sequences."""
        from .packed import grads_packed

        return grads_packed(_spec(spec), q, k, v, dout, cu_seqlens_q, cu_seqlens_k, softmax_scale=softmax_scale,
                            **tensors)

    def cache(self, spec: Any, q: Any, k_cache: Any, v_cache: Any, cache_used: Any, *,
              softmax_scale: float | None = None, **tensors: Any) -> Any:
        """Float64 (out, lse) of q over each entry's first cache_used[b] keys of a contiguous cache."""
        from .packed import attention_cache

        return attention_cache(_spec(spec), q, k_cache, v_cache, cache_used, softmax_scale=softmax_scale, **tensors)


def _spec(spec: Any) -> Any:
    from ..spec.model import AttentionSpec

    if isinstance(spec, AttentionSpec):
        return spec
    from ..spec.loader import load_spec

    return load_spec(spec)


sys.modules[__name__].__class__ = _ReferenceModule
