"""The mask trait: which keys each query row sees, as one boolean expression.

Every mask is an expression of the variant language (attngen.expr) over `b, h, q_idx, kv_idx, sq, sk` and
declared runtime tensors: the presets are named expressions (`MASKS`), bottom-right aligned as flash_attn
>= 2.1 is (query row i sits at position i + sk - sq of the keys). From the expression the compiler derives
the element test, the tile classifier (empty / partial / full by interval arithmetic) that gives the loop
bounds and block skipping, and the NumPy twins the interpreters and the reference use. `none` has no
expression: every key is visible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..spec.model import AttentionSpec
from ..spec.variant import Mask, MaskKind, TensorDecl

if TYPE_CHECKING:
    import numpy as np

#: The query's position among the keys (bottom-right alignment).
DIAG = "(q_idx + sk - sq)"


@dataclass(frozen=True)
class MaskTrait:
    """One mask: its canonical expression (None: every key visible) and the runtime tensors it reads."""

    mask: Mask
    source: str | None
    tensors: Mapping[str, TensorDecl] = field(default_factory=dict)
    scalars: Mapping[str, Any] = field(default_factory=dict)
    #: (left, right) when the mask is a window around the diagonal (-1 unbounded): a family whose loops
    #: solve the window for an interval of queries per key (the sm90 backward) serves only these.
    band: tuple[int, int] | None = None
    #: The share of the score matrix the cost models charge (the tilings are ranked at one seqlen).
    cost_density: float = 1.0
    #: The tiles the classifier keeps in every row (a query block's KV blocks) and every column (a KV block's
    #: query blocks) form one run, so the loops step by one between the first and the last. True for the
    #: presets (a test checks it by brute force); a general expression may leave empty tiles inside the run
    #: (streaming's sink tokens and window), and its loops step over them.
    contiguous: bool = False

    @property
    def name_part(self) -> str:
        return self.mask.name_part

    @property
    def kind(self) -> MaskKind:
        return self.mask.kind

    def parsed(self) -> Any:
        """The expression tree (attngen.expr), or None for `none`."""
        if self.source is None:
            return None
        from .. import expr as lang
        from ..spec.variant import _expr_scalars, _expr_tensors

        return lang.parse(self.source, role="mask", tensors=_expr_tensors(dict(self.tensors)),
                          scalars=_expr_scalars(dict(self.scalars)))

    # ---- NumPy twins (NumPy loads only here) -------------------------------------------------
    def visible(self, rows: np.ndarray, cols: np.ndarray, seqlen_q: int, seqlen_k: int, *, b: int = 0, h: int = 0,
                tensors: Mapping[str, np.ndarray] | None = None,
                scalars: Mapping[str, float] | None = None) -> np.ndarray:
        """Visibility over the outer product rows x cols (bool, 2-D); keys past seqlen_k are hidden."""
        import numpy as np

        rows, cols = np.asarray(rows)[:, None], np.asarray(cols)[None, :]
        inside = np.broadcast_to(cols < seqlen_k, (rows.shape[0], cols.shape[1]))
        tree = self.parsed()
        if tree is None:
            return inside.copy()
        from .. import expr as lang

        env = {"b": b, "h": h, "q_idx": rows, "kv_idx": cols, "sq": seqlen_q, "sk": seqlen_k}
        seen = lang.evaluate(tree, env, tensors=tensors or {}, scalars=scalars or {})
        return np.broadcast_to(seen, inside.shape) & inside


    # ---- the block schedule the kernels derive from the classifier (Variant<P> in the C++) ---------
    def tile(self, m_block: int, n_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
             points: Mapping[str, int] | None = None, tensor_bounds: Any = None) -> Any:
        """EMPTY / PARTIAL / FULL of (query block, KV block): rows past seqlen_q do not count, keys past
        seqlen_k are hidden (a tile holding some is at most PARTIAL)."""
        from .. import expr as lang

        q_lo, kv_lo = m_block * block_m, n_block * block_n
        q_hi, kv_hi = min(q_lo + block_m, seqlen_q) - 1, min(kv_lo + block_n, seqlen_k) - 1
        if q_hi < q_lo or kv_hi < kv_lo:
            return lang.TileClass.EMPTY
        tree = self.parsed()
        full = lang.TileClass.FULL
        if tree is None:
            c = full
        else:
            env = {"b": 0, "h": 0, "sq": seqlen_q, "sk": seqlen_k, **(points or {})}
            c = lang.classify(tree, (q_lo, q_hi), (kv_lo, kv_hi), env, tensor_bounds)
        return lang.TileClass.PARTIAL if c is full and kv_lo + block_n > seqlen_k else c

    def kv_block_order(self, m_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                       points: Mapping[str, int] | None = None) -> list[int]:
        """The KV blocks a query block visits, in the kernel's order (last non-empty down to first, stepping
        over empty ones unless the mask is contiguous); `points` gives b and h (0 when absent)."""
        blocks = -(-seqlen_k // block_n)
        live = [n for n in range(blocks) if self._live(m_block, n, block_m, block_n, seqlen_q, seqlen_k, points)]
        return self._walk(live)[::-1]

    def q_block_order(self, n_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                      points: Mapping[str, int] | None = None) -> list[int]:
        """The query blocks that see some key of a KV block, first to last (stepping over empty ones unless the
        mask is contiguous)."""
        blocks = -(-seqlen_q // block_m)
        live = [m for m in range(blocks) if self._live(m, n_block, block_m, block_n, seqlen_q, seqlen_k, points)]
        return self._walk(live)

    def q_block_range(self, n_block: int, block_m: int, block_n: int, seqlen_q: int,
                      seqlen_k: int) -> tuple[int, int]:
        """The query blocks [m_min, m_max) from the first to the last that see some key of a KV block."""
        live = self.q_block_order(n_block, block_m, block_n, seqlen_q, seqlen_k)
        return (live[0], live[-1] + 1) if live else (0, 0)

    def _live(self, m_block: int, n_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
              points: Mapping[str, int] | None) -> bool:
        from .. import expr as lang

        tile = self.tile(m_block, n_block, block_m, block_n, seqlen_q, seqlen_k, points)
        return tile is not lang.TileClass.EMPTY

    def _walk(self, live: list[int]) -> list[int]:
        """The blocks a loop visits, ascending: every one from the first live to the last when contiguous."""
        if self.contiguous and live:
            return list(range(live[0], live[-1] + 1))
        return live

    def block_needs_mask(self, n_block: int, m_block: int, block_m: int, block_n: int, seqlen_q: int,
                         seqlen_k: int, points: Mapping[str, int] | None = None) -> bool:
        """False guarantees every valid element of the tile is visible."""
        from .. import expr as lang

        tile = self.tile(m_block, n_block, block_m, block_n, seqlen_q, seqlen_k, points)
        return tile is not lang.TileClass.FULL

    def tile_shares(self, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int) -> dict[str, float]:
        """The share of (query block, KV block) tiles the kernels skip (empty), mask element by element
        (partial) and run unmasked (full), at batch 0, head 0; tensors read over a range count as unknown."""
        blocks_m, blocks_n = -(-seqlen_q // block_m), -(-seqlen_k // block_n)
        counts = {"empty": 0, "partial": 0, "full": 0}
        for m in range(blocks_m):
            for n in range(blocks_n):
                counts[self.tile(m, n, block_m, block_n, seqlen_q, seqlen_k).name.lower()] += 1
        total = max(1, blocks_m * blocks_n)
        return {name: count / total for name, count in counts.items()}

    @classmethod
    def window(cls, left: int, right: int) -> MaskTrait:
        """The window (left, right) around the diagonal as a trait: (-1, -1) is mask none, (-1, 0) causal."""
        kind = {(-1, -1): MaskKind.none, (-1, 0): MaskKind.causal}.get((left, right), MaskKind.sliding_window)
        window = (left, right) if kind is MaskKind.sliding_window else None
        return MASKS[kind](Mask(kind=kind, window=window))


def _band(left: int, right: int) -> str | None:
    """The window around the diagonal as an expression (-1: that side unbounded)."""
    sides = []
    if left >= 0:
        sides.append(f"kv_idx >= {DIAG} - {left}" if left else f"kv_idx >= {DIAG}")
    if right >= 0:
        sides.append(f"kv_idx <= {DIAG} + {right}" if right else f"kv_idx <= {DIAG}")
    return " and ".join(sides) or None


def _none(mask: Mask) -> MaskTrait:
    return MaskTrait(mask, None, band=(-1, -1), contiguous=True)


def _causal(mask: Mask) -> MaskTrait:
    return MaskTrait(mask, _band(-1, 0), band=(-1, 0), cost_density=0.5, contiguous=True)


def _sliding_window(mask: Mask) -> MaskTrait:
    assert mask.window is not None
    left, right = mask.window
    return MaskTrait(mask, _band(left, right), band=(left, right), contiguous=True)


def _chunked(mask: Mask) -> MaskTrait:
    chunk = mask.chunk
    return MaskTrait(mask, f"{DIAG} // {chunk} == kv_idx // {chunk} and kv_idx <= {DIAG}", contiguous=True)


def _prefix_lm(mask: Mask) -> MaskTrait:
    prefix = TensorDecl(dtype="int32", shape=("batch",))
    return MaskTrait(mask, f"kv_idx < prefix_len[b] or kv_idx <= {DIAG}", tensors={"prefix_len": prefix},
                     cost_density=0.5, contiguous=True)


def _expr(mask: Mask) -> MaskTrait:
    return MaskTrait(mask, mask.expr, tensors=dict(mask.tensors), scalars=dict(mask.scalars))


#: The trait of each mask kind: the presets are named expressions.
MASKS: dict[MaskKind, Callable[[Mask], MaskTrait]] = {
    MaskKind.none: _none,
    MaskKind.causal: _causal,
    MaskKind.sliding_window: _sliding_window,
    MaskKind.chunked: _chunked,
    MaskKind.prefix_lm: _prefix_lm,
    MaskKind.expr: _expr,
}


def mask_trait(spec: AttentionSpec) -> MaskTrait:
    return MASKS[spec.mask.kind](spec.mask)
