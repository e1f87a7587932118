"""Prepared calls: a launch's shape-dependent host work done once per call geometry.

A forward or backward launch builds parameter blocks (a hundred fields), tensor-map prototypes, grids and launch
configurations that depend only on the shapes, strides and dtypes of its tensors, its sequences' sizes and its
variant; the pointers, the scale and the variant's values change from call to call. A family's `prepare` does the
first part once and returns a ready call; `ReadyCache` keeps the ready calls of the last few geometries, so a loop
that repeats a shape (training, a benchmark) pays only for writing pointers into copies of the blocks and the
driver's launches. On the H100 machine the backward's launch work measured ~310 us a call before, against
kernels of ~870 us at 2k causal (results/h100/host_path).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, NamedTuple, TypeVar

#: Ready calls kept per kernel (a training step runs a few shapes; a shape sweep evicts the oldest).
CACHE_SIZE = 16


class TensorLayout(NamedTuple):
    """What a prepared call reads of a tensor besides its address."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: Any

    @classmethod
    def of(cls, t: Any) -> TensorLayout:
        return cls(tuple(t.shape), t.stride(), t.dtype)


@dataclass(frozen=True)
class CallGeometry:
    """The key of a ready call: the device, each tensor's layout (None for an absent one, in the launcher's order),
    the sequences' sizes and kind (runtime.seqlens.Seqlens less its tensors' values), and whether the variant's
    kernels index a tensor by the entry (they keep the 3-D grid)."""

    device: int
    layouts: tuple[TensorLayout | None, ...]
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    total_q: int
    packed: bool
    used_keys: bool
    indexes_entries: bool

    @classmethod
    def of(cls, tensors: tuple[Any, ...], seqs: Any, args: Any) -> CallGeometry:
        """The geometry of a call of `tensors` (the first one's device) with sequences `seqs` and variant
        arguments `args` (a VariantArgs)."""
        return cls(device=tensors[0].device.index or 0,
                   layouts=tuple(TensorLayout.of(t) if t is not None else None for t in tensors),
                   batch=seqs.batch, seqlen_q=seqs.seqlen_q, seqlen_k=seqs.seqlen_k, heads=seqs.heads,
                   total_q=seqs.total_q, packed=seqs.is_packed, used_keys=seqs.seqused_k is not None,
                   indexes_entries=args.indexes_entries)


Ready = TypeVar("Ready")


class ReadyCache(Generic[Ready]):
    """The ready calls of the last CACHE_SIZE geometries of one kernel, most recent last."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[CallGeometry, Ready] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: CallGeometry, make: Callable[[], Ready]) -> Ready:
        """The ready call of `key`, made by `make()` the first time (outside the lock: making one may compile)."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit
        ready = make()
        with self._lock:
            self._entries[key] = ready
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return ready

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every ready call (the kernel's cubin was replaced)."""
        with self._lock:
            self._entries.clear()


class ParamTemplate:
    """A parameter block's bytes with every field that depends only on a call's geometry written; `make` copies
    them and writes the call's own values through `fill(params)`."""

    def __init__(self, params: Any) -> None:
        self.struct = type(params)
        self.data = bytes(params)

    def make(self, fill: Callable[[Any], None]) -> Any:
        params = self.struct.from_buffer_copy(self.data)
        fill(params)
        return params


Call = TypeVar("Call")


def copied(call: Call, names: tuple[str, ...]) -> Call:
    """`call` (a dataclass) with contiguous copies of its tensors `names` (none: the call itself)."""
    if not names:
        return call
    return replace(call, **{n: getattr(call, n).contiguous() for n in names})  # type: ignore[type-var]
