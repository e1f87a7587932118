"""The kernel's parameter block: one field list renders the C++ struct and builds the ctypes twin."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from functools import lru_cache, wraps
from typing import Any


@dataclass(frozen=True)
class Field:
    name: str
    ctype: str
    py: type
    #: Element count of a C array field (0: a scalar).
    array: int = 0

    @property
    def array_suffix(self) -> str:
        return f"[{self.array}]" if self.array else ""


_PTR, _I64, _I32, _U32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_uint32, ctypes.c_float

#: Where each batch entry's sequences sit (the kernels' SeqLens): int32 cumulative lengths of packed
#: (varlen) queries and keys, the keys each entry uses (a KV cache), the order in which a 3-D grid visits packed
#: entries (longest first), a packed batch's tile table for a flat grid (TILE_TABLE_PARAMS; its rows: entries + 1),
#: each null when absent; the LSE's batch and head strides (flash_attn's layouts: (batch, heads, seqlen_q) dense,
#: (heads, total_q) packed).
SEQLEN_FIELDS: tuple[Field, ...] = (
    Field("cu_seqlens_q", "const int*", _PTR),
    Field("cu_seqlens_k", "const int*", _PTR),
    Field("seqused_k", "const int*", _PTR),
    Field("batch_order", "const int*", _PTR),
    Field("tile_table", "const int4*", _PTR),
    Field("tile_entries", "int", _I32),
    Field("lse_batch_stride", "long long", _I64),
    Field("lse_head_stride", "long long", _I64),
)

FWD_PARAMS: tuple[Field, ...] = (
    Field("q", "const void*", _PTR),
    Field("k", "const void*", _PTR),
    Field("v", "const void*", _PTR),
    Field("o", "void*", _PTR),
    Field("lse", "float*", _PTR),
    *(Field(f"{t}_{s}_stride", "long long", _I64) for t in "qkvo" for s in ("batch", "row", "head")),
    *SEQLEN_FIELDS,
    Field("seqlen_q", "int", _I32),
    Field("seqlen_k", "int", _I32),
    Field("heads", "int", _I32),
    Field("kv_heads", "int", _I32),
    Field("scale_log2", "float", _F32),
)

#: What a descaled (fp8) forward adds to FWD_PARAMS: fp32 descale factors as three planes q, k, v of
#: (batch, kv_heads) values, `descale_stride` apart (runtime/descale.py builds them).
DESCALE_FIELDS: tuple[Field, ...] = (
    Field("descale", "const float*", _PTR),
    Field("descale_stride", "long long", _I64),
)

def vt_entry(kernel_name: str) -> str:
    """The V transpose's entry point in an fp8 sm90 plan's cubin (templates/common/fp8_v_transpose.cuh.j2)."""
    return f"{kernel_name}_vt"


#: The 8-bit V transpose ahead of the wgmma fp8 forward (sm90_fwd; runtime/fp8_layout.py gives the key order): V
#: (batch, keys, kv_heads, head_dim) with its strides in bytes, into a contiguous (batch, kv_heads, head_dim,
#: padded_keys) tensor.
VT_PARAMS: tuple[Field, ...] = (
    Field("v", "const unsigned char*", _PTR),
    Field("vt", "unsigned char*", _PTR),
    Field("batch_stride", "long long", _I64),
    Field("row_stride", "long long", _I64),
    Field("head_stride", "long long", _I64),
    Field("keys", "int", _I32),
    Field("padded_keys", "int", _I32),
    Field("kv_heads", "int", _I32),
)


@dataclass(frozen=True)
class VtTile:
    """The V transpose's block (templates/common/fp8_v_transpose.cuh.j2): keys x head-dim columns of one (batch, kv
    head), and its threads. The launcher's grid and the template's constants both come from VT_TILE."""

    #: Keys a block moves: each head-dim row it stores is one 128-byte line (a 64-key tile stored half lines and
    #: moved V at 1.9-2.4 TB/s on the H200 against its 4.2 TB/s copy: results/h200/varlen_fp8_1).
    keys: int = 128
    #: Head-dim columns: each key row it loads is one 128-byte line (sm90's 8-bit head dims are multiples of 128).
    dims: int = 128
    #: 8 warps: each thread loads 4 chunks (16 KB a block in flight) and turns 16 keys x 4 columns around.
    threads: int = 256


VT_TILE = VtTile()

#: The tile table of a packed batch's flat grid (templates/common/tile_table.cuh.j2, runtime/tile_table.py): the
#: cumulative lengths, the table (int4 rows), the entries alone in the table's order (a 3-D grid's batch_order),
#: the entries, which side's rows are tiled (0 queries, 1 keys), and the tiles' rows after rounding each entry up
#: to pad_rows.
#: Entries a tile table ranks at most: its one block ranks them in shared-memory arrays of this size (36 KB of
#: static shared memory at 2048); a batch of more entries keeps the 3-D grid.
TILE_TABLE_MAX_ENTRIES = 2048


def tile_table_entry(kernel_name: str) -> str:
    """The tile table builder's entry point in a varlen plan's cubin."""
    return f"{kernel_name}_tiles"


TILE_TABLE_PARAMS: tuple[Field, ...] = (
    Field("cu_seqlens_q", "const int*", _PTR),
    Field("cu_seqlens_k", "const int*", _PTR),
    Field("table", "int4*", _PTR),
    Field("order", "int*", _PTR),
    Field("entries", "int", _I32),
    Field("key_side", "int", _I32),
    Field("tile_rows", "int", _I32),
    Field("pad_rows", "int", _I32),
)

#: The decode kernels' block (attngen/families/sm80_decode.py): the forward's, then a paged cache's block table
#: (int32 rows of table_stride entries, null for a contiguous cache; K and V's batch stride is then the pool's
#: block stride), page size and its divisor (runtime.decode.page_divisor), the KV splits, the batch, and the
#: splits' fp32 partial outputs and LSEs.
DECODE_PARAMS: tuple[Field, ...] = (
    *FWD_PARAMS,
    Field("block_table", "const int*", _PTR),
    Field("table_stride", "long long", _I64),
    Field("o_part", "float*", _PTR),
    Field("lse_part", "float*", _PTR),
    Field("page_size", "int", _I32),
    Field("page_magic", "unsigned", _U32),
    Field("page_shift", "int", _I32),
    Field("num_splits", "int", _I32),
    Field("batch", "int", _I32),
    # The paged pool's blocks (a table entry at or past it is refused on the device), and the device-checks'
    # counters in mapped host memory (runtime.device_checks): bad lengths, bad table entries.
    Field("num_blocks", "int", _I32),
    Field("check_counts", "unsigned*", _PTR),
)

#: cuTensorMapEncodeTiled's opaque 128-byte CUtensorMap (64-byte aligned in the kernel's struct).
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
_MAP = ctypes.c_ubyte * TENSOR_MAP_BYTES


def _padded(fields: tuple[Field, ...], align: int) -> tuple[Field, ...]:
    """`fields` plus a tail pad that makes the ctypes size a multiple of `align`, as the C++ struct
    of a member with alignas(align) is."""
    size = ctypes.sizeof(ctypes_struct(fields))
    pad = -size % align
    return (*fields, Field("tail_pad", "unsigned char", ctypes.c_ubyte * pad, array=pad)) if pad else fields


def ctypes_struct(fields: tuple[Field, ...], name: str = "Params") -> type[ctypes.Structure]:
    """A ctypes.Structure with the C struct's layout (same order, native alignment)."""
    return type(name, (ctypes.Structure,), {"_fields_": [(f.name, f.py) for f in fields]})


BWD_PARAMS: tuple[Field, ...] = (
    Field("q", "const void*", _PTR),
    Field("k", "const void*", _PTR),
    Field("v", "const void*", _PTR),
    Field("o", "const void*", _PTR),
    Field("dout", "const void*", _PTR),
    Field("lse", "const float*", _PTR),
    Field("delta", "float*", _PTR),
    # The LSE's gradient (the LSE's layout) or null: the preprocess writes D - dlse.
    Field("dlse", "const float*", _PTR),
    # Families that stage a query tile's row values by bulk copies: the LSE in log2 units beside D, both in
    # rows padded per entry to the query tile (rows_stride values per head); null and 0 elsewhere.
    Field("lse_log2", "float*", _PTR),
    Field("rows_stride", "long long", _I64),
    Field("dq", "void*", _PTR),
    Field("dk", "void*", _PTR),
    Field("dv", "void*", _PTR),
    Field("dq_accum", "float*", _PTR),
    *(Field(f"{t}_{s}_stride", "long long", _I64)
      for t in ("q", "k", "v", "o", "dout", "dq", "dk", "dv") for s in ("batch", "row", "head")),
    *SEQLEN_FIELDS,
    Field("seqlen_q", "int", _I32),
    Field("seqlen_k", "int", _I32),
    Field("heads", "int", _I32),
    Field("kv_heads", "int", _I32),
    Field("scale_log2", "float", _F32),
    Field("softmax_scale", "float", _F32),
    # An ordered dQ (the deterministic Hopper backward): one int semaphore per query tile of the padded row
    # buffers, zeroed; null elsewhere.
    Field("dq_sem", "int*", _PTR),
    # The Hopper backward's dq_convert under the dK/dV kernel's last wave: per (entry, KV head) the dK/dV blocks whose
    # dQ reductions are performed, zeroed by the preprocess; null elsewhere.
    Field("dkdv_done", "int*", _PTR),
    # An ordered dQ: how many chains (entry, KV head) the dK/dV grid interleaves in dispatch order, a power of two
    # dividing kv_heads x entries (families/sm90_dq_tiles.py dq_chains); 1 (or unset) elsewhere.
    Field("dq_chains", "int", _I32),
    # A causal mask's tail order: how many chains at the grid's end deal their KV blocks heaviest first across each
    # other (families/sm90_tail_order.py tail_chains); 0 (or unset): the grid's own order.
    Field("tail_chains", "int", _I32),
)


def _by_identity(fn: Any) -> Any:
    """`fn` of field tuples, remembered by the identity of its arguments first (a launch asks on every call, and
    hashing a tuple of ~40 Fields costs tens of microseconds), then by their value."""
    valued = lru_cache(maxsize=256)(fn)
    seen: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}

    @wraps(fn)
    def remembered(*args: Any) -> Any:
        hit = seen.get(tuple(map(id, args)))
        if hit is not None and all(a is b for a, b in zip(hit[0], args, strict=True)):
            return hit[1]
        result = valued(*args)
        seen[tuple(map(id, args))] = (args, result)  # the arguments stay alive: their ids are not reused
        return result

    return remembered


@_by_identity
def with_variant(fields: tuple[Field, ...], extra: tuple[Field, ...]) -> tuple[Field, ...]:
    """`fields` with a variant's runtime fields (attngen.features.variant) appended, padded again as the C++
    struct is when it holds a 64-byte aligned tensor map; `fields` itself without any."""
    if not extra:
        return fields
    base = tuple(f for f in fields if f.name != "tail_pad")
    grown = (*base, *extra)
    return _padded(grown, TENSOR_MAP_ALIGN) if any(f.ctype == "TensorMap" for f in base) else grown


@_by_identity
def struct_of(fields: tuple[Field, ...]) -> type[ctypes.Structure]:
    """The ctypes twin of `fields`, one class per field list."""
    return ctypes_struct(fields)


def set_strides(params: ctypes.Structure, **tensors: Any) -> None:
    """Fill <name>_batch_stride, <name>_row_stride and <name>_head_stride (in elements) of each
    (batch, seqlen, heads, head_dim) tensor."""
    for name, t in tensors.items():
        setattr(params, f"{name}_batch_stride", t.stride(0))
        setattr(params, f"{name}_row_stride", t.stride(1))
        setattr(params, f"{name}_head_stride", t.stride(2))


def layout(fields: tuple[Field, ...]) -> tuple[tuple[str, int], ...]:
    """(name, byte offset) of each field in the ctypes twin, plus ("sizeof", size): the templates
    static_assert the C++ struct against these, so the two can never drift apart."""
    struct = ctypes_struct(fields)
    return (*((f.name, getattr(struct, f.name).offset) for f in fields), ("sizeof", ctypes.sizeof(struct)))


#: The warp-specialized (TMA) forward: the tensor maps of Q, K and V first (64-byte aligned offsets),
#: then the multistage kernel's fields (O and the LSE are written with plain stores), then the tail order's chain count.
HOPPER_FWD_PARAMS: tuple[Field, ...] = _padded(
    (*(Field(f"tma_{t}", "TensorMap", _MAP) for t in "qkv"), *FWD_PARAMS,
     # A causal mask's tail order: how many chains (entry, head) at the grid's end deal their query blocks heaviest
     # first across each other (families/sm90_tail_order.py tail_chains); 0: the grid's own order.
     Field("tail_chains", "int", _I32)), TENSOR_MAP_ALIGN)

@functools.cache
def forward_base(fields: tuple[Field, ...], descaled: bool) -> tuple[Field, ...]:
    """A forward family's parameter block before the variant's fields: `fields` (FWD_PARAMS or HOPPER_FWD_PARAMS),
    with the descale factors appended for a descaled dtype (cached: struct_of caches by identity)."""
    return with_variant(fields, DESCALE_FIELDS) if descaled else fields


#: The Hopper dK/dV kernel: the tensor maps of Q, K, V, dO and the fp32 dQ accumulator, then the
#: backward's fields.
HOPPER_BWD_PARAMS: tuple[Field, ...] = _padded(
    (*(Field(f"tma_{t}", "TensorMap", _MAP) for t in ("q", "k", "v", "do", "dq_accum")), *BWD_PARAMS),
    TENSOR_MAP_ALIGN)
