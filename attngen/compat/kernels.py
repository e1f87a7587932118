"""The compiled kernels of the compatible functions: one per (KernelOptions, GPU arch), built on first use and
kept for the life of the process."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .options import KernelOptions, spec_for

if TYPE_CHECKING:
    from ..runtime.kernel import AttentionKernel


@dataclass(frozen=True)
class CacheKey:
    options: KernelOptions
    #: The arch of the GPU the call's tensors are on ("sm90"); "" where there is none (tests' fake kernels).
    arch: str


_KERNELS: dict[CacheKey, Any] = {}
_LOCK = threading.Lock()


def device_arch(device: Any) -> str:
    """The attngen arch of a CUDA device ("sm90"), "" for any other device (the kernels then refuse the
    tensors by name)."""
    if getattr(device, "type", None) != "cuda":
        return ""
    from ..runtime.device import current_arch

    return current_arch(device).value


def compile_kernel(options: KernelOptions, arch: str) -> AttentionKernel:
    """Build the kernel of `options` for `arch` (attngen.compile of spec_for(options))."""
    from ..runtime.kernel import compile as compile_spec

    spec = spec_for(options)
    if not arch:
        raise ValueError("q, k and v must be CUDA tensors (attngen's kernels run on the GPU), got tensors on "
                         "another device")
    return compile_spec(spec, arch=arch)


def kernel_for(options: KernelOptions, device: Any) -> Any:
    """The kernel of `options` for the GPU `device` names, compiled on first use."""
    key = CacheKey(options, device_arch(device))
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel
    with _LOCK:
        kernel = _KERNELS.get(key)
        if kernel is None:
            kernel = compile_kernel(options, key.arch)
            _KERNELS[key] = kernel
    return kernel


def cached_options() -> list[KernelOptions]:
    """The options of every kernel built so far (in the order they were built)."""
    return [key.options for key in _KERNELS]


def clear_cache() -> None:
    """Forget every compiled kernel (the next call compiles again)."""
    with _LOCK:
        _KERNELS.clear()
