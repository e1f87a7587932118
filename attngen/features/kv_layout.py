"""The KV-layout trait: where the rows of K and V live in memory.

Today there is one layout, `dense`: K and V are (batch, seqlen_k, kv_heads, head_dim) tensors with a
contiguous last dimension, addressed through batch, row and head strides (in elements) that the launcher
writes into the kernel's parameter block. `KV_LAYOUTS` maps each layout's name to its trait; the spec has
no field for it (every spec is dense), so `kv_layout_trait` gives the dense trait for any spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..codegen.abi import Field
    from ..spec.model import AttentionSpec


@dataclass(frozen=True)
class DenseKV:
    """K and V as strided (batch, seqlen_k, kv_heads, head_dim) tensors."""

    name: str = "dense"
    #: The fields of the parameter block this layout fills (abi.FWD_PARAMS, abi.BWD_PARAMS and the
    #: Hopper blocks, which hold them after their TMA maps): the strides of K and V, in elements.
    runtime_fields: tuple[str, ...] = tuple(f"{t}_{s}_stride" for t in "kv" for s in ("batch", "row", "head"))

    def fields(self, params: tuple[Field, ...]) -> tuple[Field, ...]:
        """This layout's fields of the parameter block `params`, in the block's order (all of them)."""
        mine = tuple(f for f in params if f.name in self.runtime_fields)
        missing = set(self.runtime_fields) - {f.name for f in mine}
        assert not missing, f"the parameter block has no {sorted(missing)}"
        return mine

    # ---- the NumPy reference, for the interpreters ----
    def gather(self, k: np.ndarray, v: np.ndarray, batch: int, kv_head: int) -> tuple[np.ndarray, np.ndarray]:
        """The (seqlen_k, head_dim) rows of K and V that query heads of `kv_head` in `batch` attend to."""
        return k[batch, :, kv_head], v[batch, :, kv_head]


#: The trait of each KV layout, by name.
KV_LAYOUTS: dict[str, DenseKV] = {"dense": DenseKV()}


def kv_layout_trait(spec: AttentionSpec) -> DenseKV:
    """The KV layout of `spec`: dense (the spec has no field that names another)."""
    return KV_LAYOUTS["dense"]
