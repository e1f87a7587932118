"""Arrival counters for kernels whose last block of a group finishes the group's work (the split-KV decode: the
last of an output row block's splits merges them, instead of a combine kernel).

A counter is an int32 that reads zero between launches: the group's blocks add one each as they finish and the
last to arrive sets it back to zero. So a counter can serve every launch that runs after the previous one has
ended, which is what one stream gives, and only those. The pool hands out slices of zeroed slabs:

- an eager launch gets its stream's slice (grown when a call needs more counters);
- a launch captured into a CUDA graph gets a slice of its own, never handed out again: the graph's replays are
  its only users, whatever stream they are replayed on;
- a capture that finds no zeroed slice left gets none (a slab cannot be zeroed inside a capture), and the
  caller takes its path that needs no counters.

Slabs are zeroed outside any capture and kept for the process's life (graphs hold pointers into them); each is
SLAB_COUNTERS int32 (256 KB) unless one call asks more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: int32 counters per slab: a decode call needs batch x KV heads x 16-row blocks of them.
SLAB_COUNTERS = 1 << 16
#: Counters a slab keeps free for captures: below this, the next eager call zeroes a new slab.
CAPTURE_RESERVE = 1 << 14


@dataclass
class Slab:
    """One zeroed int32 buffer (`tensor` keeps it alive), handed out front to back."""

    tensor: Any
    base: int
    size: int
    used: int = 0

    def take(self, n: int) -> int | None:
        """The address of n fresh counters, or None when fewer are left."""
        if self.used + n > self.size:
            return None
        at = self.base + 4 * self.used
        self.used += n
        return at


@dataclass
class CounterPool:
    """The counters of one device. `zeros(n)`: a zeroed int32 device tensor of n elements, finished when it
    returns; `capturing()`: whether the current stream is capturing a CUDA graph."""

    zeros: Callable[[int], Any]
    capturing: Callable[[], bool]
    slabs: list[Slab] = field(default_factory=list)
    #: Per stream handle: (address, counters) of its slice.
    streams: dict[int, tuple[int, int]] = field(default_factory=dict)

    def counters(self, stream: int, n: int) -> int:
        """The address of n zeroed counters for a launch on `stream` (0: none to be had while capturing)."""
        if self.capturing():
            at = self.slabs[-1].take(n) if self.slabs else None
            return at or 0
        mine = self.streams.get(stream)
        if mine is not None and mine[1] >= n:
            return mine[0]
        at = self._take(n)
        self.streams[stream] = (at, n)
        return at

    def _take(self, n: int) -> int:
        """n counters of the newest slab, after zeroing a new one when it lacks them or its capture reserve."""
        slab = self.slabs[-1] if self.slabs else None
        if slab is None or slab.size - slab.used < n + CAPTURE_RESERVE:
            size = max(SLAB_COUNTERS, n + CAPTURE_RESERVE)
            tensor = self.zeros(size)
            slab = Slab(tensor=tensor, base=int(tensor.data_ptr()), size=size)
            self.slabs.append(slab)
        at = slab.take(n)
        assert at is not None
        return at


_POOLS: dict[int, CounterPool] = {}


def pool(device_index: int) -> CounterPool:
    """Device `device_index`'s counter pool (made on first use)."""
    found = _POOLS.get(device_index)
    if found is None:
        found = _POOLS[device_index] = CounterPool(zeros=lambda n: _zeros(device_index, n),
                                                   capturing=_capturing)
    return found


def _zeros(device_index: int, n: int) -> Any:
    import torch

    tensor = torch.zeros(n, dtype=torch.int32, device=f"cuda:{device_index}")
    # Captures on other streams may use the slab: its zeros must have landed first.
    torch.cuda.current_stream(device_index).synchronize()
    return tensor


def _capturing() -> bool:
    import torch

    return bool(torch.cuda.is_current_stream_capturing())
