"""The GPU the tensors are on, as an attngen arch: what the forward and backward launchers both ask."""

from __future__ import annotations

from functools import cache
from typing import Any

from ..spec.model import Arch


def current_arch(device: Any = None) -> Arch:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is available; pass an arch to attngen.build to compile without one")
    index = getattr(device, "index", device)
    return _arch_of(torch.cuda.current_device() if index is None else int(index))


@cache
def _arch_of(index: int) -> Arch:
    """The arch of device `index` (asked once per device: the launchers ask on every call)."""
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return Arch.from_capability(major, minor)
