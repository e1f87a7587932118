"""TMA tensor maps of the Hopper kernels: a (batch, seqlen, heads, head_dim) tensor as a 4-D map
(head_dim, seqlen, heads, batch) whose box is one 64-column, 128-byte-swizzled slab of a tile.

Encoding goes through the driver (cuTensorMapEncodeTiled); the last few maps are kept, keyed by
everything that defines them, so a training loop re-encodes nothing.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from ..codegen.abi import TENSOR_MAP_BYTES
from ..errors import LaunchError
from ..features.dtype import trait_of_torch
from .driver import check_result

#: Bytes per box row: the widest row the 128-byte swizzle allows (64 16-bit or 32 fp32 columns).
#: Every map is 128-byte swizzled.
BOX_ROW_BYTES = 128
#: The dQ accumulator's element type (its bulk reductions add fp32); the element types of Q, K, V and dO
#: come from their dtype trait (features/dtype.py).
FP32_DATA_TYPE = "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"
FP32_BYTES = 4
#: Maps kept per process (three per launch; a training step launches a few shapes).
CACHE_SIZE = 64
#: TMA strides: multiples of 16 bytes below 2^40 (cuTensorMapEncodeTiled).
STRIDE_ALIGN = 16
MAX_STRIDE = 1 << 40


@dataclass(frozen=True)
class MapKey:
    address: int
    #: Elements along (head_dim, seqlen, heads, batch).
    dims: tuple[int, int, int, int]
    #: Bytes between consecutive seqlen, heads and batch indices.
    strides: tuple[int, int, int]
    box_rows: int
    #: The CUtensorMapDataType member of its elements (the dtype trait's `tma`, or FP32_DATA_TYPE).
    data_type: str
    #: Bytes per element.
    elem_bytes: int

    @property
    def fp32(self) -> bool:
        """fp32 elements (the dQ accumulator's bulk reductions)."""
        return self.data_type == FP32_DATA_TYPE

    @property
    def box_cols(self) -> int:
        return BOX_ROW_BYTES // self.elem_bytes


_CACHE: OrderedDict[MapKey, bytes] = OrderedDict()
_LOCK = threading.Lock()


def map_key(t: object, box_rows: int) -> MapKey:
    """The key of a (batch, seqlen, heads, head_dim) torch tensor with a contiguous last dim: of an
    attngen element type (its dtype trait gives the TMA type), or fp32 (the dQ accumulator).

    An empty dimension becomes 1 (a map cannot be empty; the kernel never reads past the true
    length); a dimension of size 1 gets a placeholder stride, since TMA rejects 0 and never uses it.
    """
    batch, seqlen, heads, head_dim = t.shape  # type: ignore[attr-defined]
    if str(t.dtype) == "torch.float32":  # type: ignore[attr-defined]
        data_type, elem = FP32_DATA_TYPE, FP32_BYTES
    else:
        trait = trait_of_torch(t.dtype)  # type: ignore[attr-defined]
        data_type, elem = trait.tma, trait.size
    raw = (t.stride(1), t.stride(2), t.stride(0))  # type: ignore[attr-defined]
    seq_s, head_s, batch_s = (int(s) * elem if n > 1 else STRIDE_ALIGN
                              for s, n in zip(raw, (seqlen, heads, batch), strict=True))
    strides = (seq_s, head_s, batch_s)
    for name, s in zip(("seqlen", "heads", "batch"), strides, strict=True):
        if s <= 0 or s % STRIDE_ALIGN or s >= MAX_STRIDE:
            raise LaunchError(f"a tensor's {name} stride of {s} bytes cannot be described to TMA (a positive "
                              f"multiple of {STRIDE_ALIGN} below 2^40 is needed); pass a contiguous tensor")
    dims = (head_dim, max(1, seqlen), max(1, heads), max(1, batch))
    return MapKey(address=t.data_ptr(), dims=dims, strides=strides, box_rows=box_rows,  # type: ignore[attr-defined]
                  data_type=data_type, elem_bytes=elem)


def describable(t: object) -> bool:
    """Whether TMA can address `t` in place (else the launcher passes a contiguous copy): a 16-byte
    aligned base and positive strides that are multiples of 16 bytes on every dimension of size > 1."""
    elem = t.element_size()  # type: ignore[attr-defined]
    if t.data_ptr() % STRIDE_ALIGN:  # type: ignore[attr-defined]
        return False
    for dim in range(3):
        size, stride = t.shape[dim], t.stride(dim) * elem  # type: ignore[attr-defined]
        if size > 1 and (stride <= 0 or stride % STRIDE_ALIGN or stride >= MAX_STRIDE):
            return False
    return True


def _encode(key: MapKey) -> bytes:
    from cuda.bindings import driver

    dtype = getattr(driver.CUtensorMapDataType, key.data_type)
    swizzle = driver.CUtensorMapSwizzle
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t
    err, tmap = driver.cuTensorMapEncodeTiled(
        dtype, 4, key.address, [u64(d) for d in key.dims], [u64(s) for s in key.strides],
        [u32(b) for b in (key.box_cols, key.box_rows, 1, 1)], [u32(1)] * 4,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    check_result((err,), f"encoding a TMA tensor map (dims {key.dims}, strides {key.strides} B, box "
                         f"{key.box_cols} x {key.box_rows})")
    return ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)


def tensor_map(key: MapKey) -> bytes:
    """The 128 bytes of the map, encoded once per key."""
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    data = _encode(key)
    with _LOCK:
        _CACHE[key] = data
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return data


def fill(params: ctypes.Structure, field: str, data: bytes) -> None:
    """Copies a map into its 128-byte field of the kernel's parameter block."""
    offset = getattr(type(params), field).offset
    ctypes.memmove(ctypes.addressof(params) + offset, data, TENSOR_MAP_BYTES)


@dataclass(frozen=True)
class MapSlot:
    """A tensor map of a prepared launch (runtime.prepared): its field, the attribute `name` that holds its tensor (of
    the call, or of another object such as the backward's buffers) and its key less the address."""

    field: str
    name: str
    proto: MapKey

    def fill(self, params: ctypes.Structure, owner: Any) -> None:
        """The map of `owner`'s tensor, into its field of `params` (encoded once per address)."""
        address = getattr(owner, self.name).data_ptr()
        fill(params, self.field, tensor_map(replace(self.proto, address=address)))


def needs_copy(call: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """The attributes among `names` of `call` whose tensors TMA cannot address in place (a stride-0 broadcast, say):
    a launch passes contiguous copies of them."""
    return tuple(n for n in names if not describable(getattr(call, n)))
