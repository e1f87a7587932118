"""What the kernels check themselves: values the host could read only by waiting for the GPU. A KV-cache decode
call's lengths (cache_seqlens) and block table live on the GPU; checking them on the host costs a copy and a sync
per call, which a decode loop cannot afford. The decode kernels check them instead (DecodeCheck in
decode_mainloop.cuh.j2): a bad value is never read past the cache, the blocks that met it write NaN, and each adds
one to a counter per kind in mapped host memory, one set per device. The launcher reads the counters before every
later decode call, without a sync, and raises DeviceCheckError for the counts it has not reported yet;
`check_device_errors()` waits for the device first, so it reports every call made before it.

The counters are never written by the host (a reset could race a kernel's add): each set remembers how much it
has reported.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeviceCheckError


@dataclass(frozen=True)
class CheckKind:
    """One counter: the argument it is about and what the kernels found."""

    argument: str
    found: str


#: The counters in order (their index is the kernels' p.check_counts[i]).
KINDS: tuple[CheckKind, ...] = (
    CheckKind("cache_seqlens", "a length outside [0, the cache's rows] (plus the new keys)"),
    CheckKind("block_table", "an entry of a used page outside [0, the pool's blocks)"),
)

#: Flags of cuMemHostAlloc: CU_MEMHOSTALLOC_PORTABLE (every context) | CU_MEMHOSTALLOC_DEVICEMAP (kernels write it).
_HOST_ALLOC_FLAGS = 0x1 | 0x2


@dataclass
class Counters:
    """One device's counters: `host` is their address here, `device` the one kernels write (equal under unified
    addressing); `reported` the counts already raised."""

    host: int
    device: int
    reported: list[int] = field(default_factory=lambda: [0] * len(KINDS))
    view: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.view = (ctypes.c_uint32 * len(KINDS)).from_address(self.host)   # reads the memory at every index

    def read(self) -> list[int]:
        return self.view[:]

    def raise_new(self, where: str) -> None:
        """DeviceCheckError naming every kind whose count grew since the last report."""
        counts = self.read()
        if counts == self.reported:
            return
        new = [(kind, (now - old) % 2**32) for kind, now, old in zip(KINDS, counts, self.reported, strict=True)
               if now != old]
        self.reported = list(counts)
        found = "; ".join(f"{kind.argument}: {kind.found} (met by {n} thread block{'s' if n > 1 else ''})"
                          for kind, n in new)
        raise DeviceCheckError(
            f"an earlier KV-cache decode call on {where} was passed values out of range, found by its kernels: "
            f"{found}. Those entries' outputs are NaN and nothing was read outside the cache. Pass lengths in "
            f"[0, the cache's rows] and table entries that index the pool; to find the call, set "
            f"ATTNGEN_HOST_CHECKS=1 (every call checks on the host, one sync each) or call "
            f"attngen.check_device_errors() after the calls you suspect")


_LOCK = threading.Lock()
_COUNTERS: dict[int, Counters] = {}


def counters(device_index: int) -> Counters:
    """The counters of device `device_index`, allocated (zeroed) on first use."""
    found = _COUNTERS.get(device_index)
    if found is not None:
        return found
    from .driver import _driver, check_result, ensure_context

    driver = _driver()
    with _LOCK:
        found = _COUNTERS.get(device_index)
        if found is None:
            ensure_context(device_index)
            nbytes = 4 * len(KINDS)
            (host,) = check_result(driver.cuMemHostAlloc(nbytes, _HOST_ALLOC_FLAGS), "allocating the check counters")
            ctypes.memset(int(host), 0, nbytes)
            (device,) = check_result(driver.cuMemHostGetDevicePointer(host, 0), "mapping the check counters")
            found = _COUNTERS[device_index] = Counters(host=int(host), device=int(device))
    return found


def raise_pending(device_index: int) -> None:
    """Raise DeviceCheckError if kernels on the device counted bad values not reported yet (no sync: a call still
    running reports at a later check)."""
    found = _COUNTERS.get(device_index)
    if found is not None:
        found.raise_new(f"cuda:{device_index}")


def check_device_errors(device: Any = None) -> None:
    """Wait for `device` (a torch.device, an index, or None: the current one), then raise DeviceCheckError if any
    KV-cache decode call made on it before was passed lengths or table entries out of range."""
    import torch

    index = getattr(device, "index", device)
    index = torch.cuda.current_device() if index is None else int(index)
    torch.cuda.synchronize(index)
    raise_pending(index)
