"""The GPU the tensors are on, as an attngen arch: what the forward and backward launchers both ask."""

from __future__ import annotations

from typing import Any

from ..spec.model import Arch


def current_arch(device: Any = None) -> Arch:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is available; pass an arch to attngen.build to compile without one")
    major, minor = torch.cuda.get_device_capability(device)
    return Arch.from_capability(major, minor)
