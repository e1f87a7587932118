"""The tile search space of each forward pipeline: data that the planners enumerate and that spec
validation checks `tiles` overrides against, so what a spec may ask for is what a planner tries.

A leaf module: it imports nothing from attngen (spec.py and the planners both import it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

TILE_FIELDS: tuple[str, ...] = ("block_m", "block_n", "num_warps")

# ---- multistage: mma.sync tensor cores fed by a cp.async ring (every arch) ---------------------

#: Rows of one mma.sync m16n8k16 tile: a warp owns whole 16-row tiles of the query block.
MMA_M = 16
#: Warps per block.
WARPS = (4, 8)
#: 16-row MMA tiles each warp owns (block_m = 16 x warp_m_tiles x num_warps).
WARP_M_TILES = (1, 2)
#: KV rows per block.
BLOCK_NS = (32, 64, 128)
#: Stages tried when the spec names none.
AUTO_STAGES = (2, 3)
#: block_m above 128 leaves too few query blocks to fill the GPU at 2k tokens.
MAX_BLOCK_M = 128

# ---- Hopper: a TMA producer warpgroup and wgmma consumer warpgroups (sm90 only) ----------------

#: The arches the Hopper pipelines compile for (wgmma and TMA are sm_90a instructions).
HOPPER_ARCHS: tuple[str, ...] = ("sm90",)
#: Head dims the Hopper pipelines serve are multiples of this: the 128-byte swizzled TMA boxes hold
#: 64 columns each.
HOPPER_HEAD_DIM_MULTIPLE = 64
#: Query rows of one consumer warpgroup: wgmma's M.
WGMMA_M = 64
#: Warps of one warpgroup (the producer's included).
WARPS_PER_WARPGROUP = 4
#: Consumer warpgroups per block: 2 (block_m 128) or 3 (block_m 192; 160 registers each, so only
#: small head dims fit).
CONSUMER_WGS = (2, 3)
#: Ping-pong alternates exactly two consumer warpgroups.
PINGPONG_CONSUMER_WGS = (2,)
#: KV rows per block: wgmma N of S = Q K^T (a multiple of 8 up to 256), k-steps of 16 for O += P V,
#: and 1024-byte tile alignment (block_n x 128 bytes per 64-column box).
HOPPER_BLOCK_NS = (64, 80, 96, 112, 128, 144, 160, 176, 192, 256)
#: Two stages keep one K/V tile pair loading while another is consumed; three help where tiles are small.
HOPPER_AUTO_STAGES = (2, 3)


@dataclass(frozen=True)
class MultistageBlock:
    """One block shape the multistage pipeline tries: its query rows, its warps, 16-row MMA tiles per warp."""

    block_m: int
    num_warps: int
    warp_m_tiles: int


@dataclass(frozen=True)
class WarpgroupBlock:
    """One block shape a Hopper pipeline tries: its query rows, its warps (the producer warpgroup's
    included), wgmma consumer warpgroups of 64 rows."""

    block_m: int
    num_warps: int
    consumer_warpgroups: int


BlockT = TypeVar("BlockT", MultistageBlock, WarpgroupBlock)


@dataclass(frozen=True)
class Space(Generic[BlockT]):
    """The tilings one pipeline enumerates: every block shape with every block_n."""

    pipeline: str
    blocks: tuple[BlockT, ...]
    block_ns: tuple[int, ...]
    auto_stages: tuple[int, ...]
    hopper: bool

    def values(self, field: str) -> tuple[int, ...]:
        """The values of one tile field this pipeline tries, ascending."""
        if field == "block_n":
            return self.block_ns
        return tuple(sorted({getattr(b, field) for b in self.blocks}))

    def holds(self, tiles: Mapping[str, int]) -> bool:
        """Whether some tiling of this space has every value of `tiles` (a partial override)."""
        if "block_n" in tiles and tiles["block_n"] not in self.block_ns:
            return False
        return any(all(getattr(b, f) == v for f, v in tiles.items() if f != "block_n") for b in self.blocks)


def _multistage_blocks() -> tuple[MultistageBlock, ...]:
    shapes = ((MMA_M * mt * w, w, mt) for w in WARPS for mt in WARP_M_TILES)
    return tuple(MultistageBlock(block_m=m, num_warps=w, warp_m_tiles=mt) for m, w, mt in shapes if m <= MAX_BLOCK_M)


def _hopper_blocks(consumer_wgs: Iterable[int]) -> tuple[WarpgroupBlock, ...]:
    return tuple(WarpgroupBlock(block_m=WGMMA_M * c, num_warps=WARPS_PER_WARPGROUP * (c + 1), consumer_warpgroups=c)
                 for c in consumer_wgs)


MULTISTAGE = Space("multistage", _multistage_blocks(), BLOCK_NS, AUTO_STAGES, hopper=False)
WARP_SPECIALIZED = Space("warp_specialized", _hopper_blocks(CONSUMER_WGS), HOPPER_BLOCK_NS, HOPPER_AUTO_STAGES,
                         hopper=True)
PINGPONG = Space("pingpong", _hopper_blocks(PINGPONG_CONSUMER_WGS), HOPPER_BLOCK_NS, HOPPER_AUTO_STAGES,
                 hopper=True)
#: Every forward pipeline's space, by pipeline name (PipelineKind's values but auto).
SPACES: dict[str, Space[Any]] = {s.pipeline: s for s in (MULTISTAGE, WARP_SPECIALIZED, PINGPONG)}


def all_values(field: str) -> tuple[int, ...]:
    """The values of one tile field that some pipeline tries."""
    return tuple(sorted({v for s in SPACES.values() for v in s.values(field)}))


# ---- describing a space in messages --------------------------------------------------------------

def join_values(values: Sequence[int]) -> str:
    """(64,) -> '64'; (64, 128) -> '64 or 128'; a long even run -> '64 to 192 in steps of 16', and one value past it
    -> '64 to 192 in steps of 16, or 256'."""
    steps = [b - a for a, b in itertools.pairwise(values)]
    if len(values) > 3 and len(set(steps)) == 1:
        return f"{values[0]} to {values[-1]} in steps of {steps[0]}"
    if len(values) > 4 and len(set(steps[:-1])) == 1:
        return f"{join_values(values[:-1])}, or {values[-1]}"
    if len(values) == 1:
        return str(values[0])
    return ", ".join(map(str, values[:-1])) + f" or {values[-1]}"


def only_note(space: Space) -> str:
    return f" ({', '.join(HOPPER_ARCHS)} only)" if space.hopper else ""


def tries(spaces: Sequence[Space], field: str) -> str:
    """'the multistage pipeline tries block_m 64 or 128; warp_specialized tries 128 or 192 (sm90 only)'."""
    groups: dict[tuple[tuple[int, ...], bool], list[Space]] = {}
    for space in spaces:
        groups.setdefault((space.values(field), space.hopper), []).append(space)
    parts: list[str] = []
    for (values, _), group in groups.items():
        names = " and ".join(s.pipeline for s in group)
        verb = "try" if len(group) > 1 else "tries"
        if not parts:
            names = f"the {names} pipeline{'s' if len(group) > 1 else ''}"
        shown = f"{field} {join_values(values)}" if not parts else join_values(values)
        parts.append(f"{names} {verb} {shown}{only_note(group[0])}")
    return "; ".join(parts)


def blocks_of(space: Space) -> str:
    """'multistage tries block_m 64 with 4 warps or 128 with 4 or 8 warps, each with block_n 32, 64 or 128'."""
    warps: dict[int, list[int]] = {}
    for block in space.blocks:
        warps.setdefault(block.block_m, []).append(block.num_warps)
    shapes = [f"{m} with {join_values(sorted(w))} warps" for m, w in sorted(warps.items())]
    joined = shapes[0] if len(shapes) == 1 else ", ".join(shapes[:-1]) + f" or {shapes[-1]}"
    return (f"{space.pipeline} tries block_m {joined}, each with block_n {join_values(space.block_ns)}"
            f"{only_note(space)}")


def show_tiles(tiles: Mapping[str, int]) -> str:
    """{'block_m': 64, 'num_warps': 8} -> '{block_m: 64, num_warps: 8}' (as a spec writes them)."""
    return "{" + ", ".join(f"{f}: {tiles[f]}" for f in TILE_FIELDS if f in tiles) + "}"


def outside(tiles: Mapping[str, int], spaces: Sequence[Space]) -> str | None:
    """None when one of `spaces` holds the overrides `tiles`, else what those spaces try instead.

    One field no space tries is named alone ("tiles.block_m 256: the multistage pipeline tries ...");
    values each tried somewhere but never together are shown with every space's block shapes.
    """
    if any(s.holds(tiles) for s in spaces):
        return None
    for field in TILE_FIELDS:
        value = tiles.get(field)
        if value is not None and all(value not in s.values(field) for s in spaces):
            return f"tiles.{field} {value}: {tries(spaces, field)}; {value} is not among them"
    shapes = "; ".join(blocks_of(s) for s in spaces)
    return f"tiles {show_tiles(tiles)}: no pipeline tries these values together: {shapes}"
