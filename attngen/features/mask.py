"""The mask trait: which keys each query row sees.

The kernels take the mask as a C++ type (`Mask` in the generated source) with four static functions
that the block schedule and the element mask call: the KV blocks a query block visits, the query blocks
a KV block is visited by, whether a (query block, KV block) tile needs the element mask, and whether one
element is visible. `MASKS` maps each `MaskKind` to the trait that serves it; today's three kinds are
one family of windows, bottom-right aligned (flash_attn >= 2.1): query row i sees key j iff
i + sk - sq - left <= j <= i + sk - sq + right, -1 meaning unbounded on that side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..spec.model import AttentionSpec, MaskKind

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class WindowMask:
    """A window around the diagonal: `left` keys before it, `right` after it (-1: unbounded).
    mask none is (-1, -1), causal (-1, 0)."""

    kind: MaskKind
    left: int
    right: int

    #: The template snippet that defines the C++ struct (templates/features/).
    snippet: str = "features/window_mask.cuh.j2"

    @property
    def cxx_type(self) -> str:
        """The C++ type the kernels instantiate."""
        return f"WindowMask<{self.left}, {self.right}>"

    @property
    def name_part(self) -> str:
        """The mask's part of a kernel name: `none`, `causal`, `window_128_0` (`inf` for unbounded)."""
        if self.kind is not MaskKind.sliding_window:
            return self.kind.value
        left, right = ("inf" if side < 0 else str(side) for side in (self.left, self.right))
        return f"window_{left}_{right}"

    @property
    def cost_density(self) -> float:
        """The share of the score matrix the cost models charge: half under a causal mask, else all of
        it (a window's share depends on the seqlen; the models rank tilings at one reference seqlen)."""
        return 0.5 if self.kind is MaskKind.causal else 1.0

    @classmethod
    def of(cls, left: int, right: int) -> WindowMask:
        """The window (left, right) as a trait: (-1, -1) is mask none, (-1, 0) causal."""
        kind = {(-1, -1): MaskKind.none, (-1, 0): MaskKind.causal}.get((left, right), MaskKind.sliding_window)
        return cls(kind, left, right)

    # ---- the NumPy twin of the C++ struct (reference.schedule's formulas), for the interpreters; NumPy loads
    # only here, so planning with the trait does not load it ----
    def visible(self, rows: np.ndarray, cols: np.ndarray, seqlen_q: int, seqlen_k: int) -> np.ndarray:
        """Visibility over the outer product rows x cols (bool, 2-D)."""
        from ..reference import schedule

        return schedule.visible_tile(rows, cols, seqlen_q, seqlen_k, self.left, self.right)

    def kv_block_order(self, m_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int) -> list[int]:
        """The KV blocks a query block visits, in the kernel's order."""
        from ..reference import schedule

        return list(schedule.kv_block_order(m_block, block_m, block_n, seqlen_q, seqlen_k, self.left, self.right))

    def q_block_range(self, n_block: int, block_m: int, block_n: int, seqlen_q: int,
                      seqlen_k: int) -> tuple[int, int]:
        """The query blocks [m_min, m_max) that see some key of a KV block."""
        from ..reference import schedule

        return schedule.q_block_range(n_block, block_m, block_n, seqlen_q, seqlen_k, self.left, self.right)

    def block_needs_mask(self, n_block: int, m_block: int, block_m: int, block_n: int, seqlen_q: int,
                         seqlen_k: int) -> bool:
        """False guarantees every valid element of the tile is visible."""
        from ..reference import schedule

        return schedule.block_needs_mask(n_block, m_block, block_m, block_n, seqlen_q, seqlen_k, self.left,
                                         self.right)


def _window(spec: AttentionSpec) -> WindowMask:
    return WindowMask(spec.mask, spec.window_left, spec.window_right)


#: The trait of each mask kind.
MASKS: dict[MaskKind, Callable[[AttentionSpec], WindowMask]] = {
    MaskKind.none: _window,
    MaskKind.causal: _window,
    MaskKind.sliding_window: _window,
}


def mask_trait(spec: AttentionSpec) -> WindowMask:
    return MASKS[spec.mask](spec)
