"""The GPU the tensors are on, as an attngen arch: what the forward and backward launchers both ask."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from ..spec.model import Arch


def current_arch(device: Any = None) -> Arch:
    """The arch of `device` (a torch.device, an index, or None: the current device). A device with an index comes
    from a CUDA tensor, so only the others ask whether CUDA is available (~5 us a question, on every call)."""
    index = getattr(device, "index", device)
    if index is None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is available; pass an arch to attngen.build to compile without one")
        index = torch.cuda.current_device()
    return _arch_of(int(index))


@cache
def _arch_of(index: int) -> Arch:
    """The arch of device `index` (asked once per device: the launchers ask on every call)."""
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return Arch.from_capability(major, minor)


@cache
def sm_count(index: int) -> int:
    """The streaming multiprocessors of device `index` (asked once per device)."""
    import torch

    return int(torch.cuda.get_device_properties(index).multi_processor_count)


@cache
def dram_gbps(index: int) -> float | None:
    """Device `index`'s peak DRAM bandwidth in GB/s: two transfers a memory clock over its bus (H100 SXM: 2619 MHz
    x 5120 bits, 3352 GB/s; H200: 3201 MHz x 6144 bits, 4917 GB/s), asked once per device; None where the driver
    reports no memory clock or refuses the question (the callers then take their arch's figure)."""
    from ..errors import LaunchError
    from .driver import memory_interface

    try:
        clock_khz, bus_bits = memory_interface(index)
    except LaunchError:
        return None
    return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9 if clock_khz > 0 and bus_bits > 0 else None


def stream_handle(index: int) -> int:
    """The CUstream handle of device `index`'s current PyTorch stream. torch.cuda.current_stream builds a Stream
    object (~5 us a call); the raw handle is what a launch takes, and what Triton's launcher asks torch for."""
    return int(_raw_stream()(index))


@cache
def _raw_stream() -> Callable[[int], int]:
    """torch's raw current-stream accessor, or the public API's equivalent where this torch lacks it."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)
