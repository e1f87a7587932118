"""The torch.library custom op `attngen::attention_fwd` that every compiled kernel launches through.

The op is registered on first use (never at import). A compiled AttentionKernel registers its
launcher under a key; the op's string argument names it, so torch.compile traces one op for all.
"""

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import env

if TYPE_CHECKING:
    import torch

#: (q, k, v, out, lse, softmax_scale) -> None, launching the kernel into out and lse.
Launcher = Callable[..., None]
_LAUNCHERS: dict[str, Launcher] = {}
_REGISTERED = False


def register_launcher(key: str, launcher: Launcher) -> None:
    ensure_registered()
    _LAUNCHERS[key] = launcher


def _aligned(t: "torch.Tensor") -> bool:
    """cp.async moves 16 bytes: the base and every row start must be 16-byte aligned."""
    return t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:-1])


def _fwd_impl(q: Any, k: Any, v: Any, softmax_scale: float, kernel: str) -> Any:
    import torch

    launcher = _LAUNCHERS.get(kernel)
    if launcher is None:
        raise ValueError(f"kernel '{kernel}' is not loaded in this process; build it with attngen.compile")
    # A fresh allocation is aligned; .contiguous() alone would return a misaligned tensor as it is.
    q, k, v = (t if _aligned(t) else torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)
               for t in (q, k, v))
    batch, seqlen_q, heads, _ = q.shape
    fill = math.nan if env.poison_outputs() else None
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    if fill is not None:
        out.fill_(fill)
        lse.fill_(fill)
    if out.numel():
        launcher(q, k, v, out, lse, softmax_scale)
    return out, lse


def _fwd_fake(q: Any, k: Any, v: Any, softmax_scale: float, kernel: str) -> Any:
    import torch

    batch, seqlen_q, heads, _ = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    return out, q.new_empty((batch, heads, seqlen_q), dtype=torch.float32)


def ensure_registered() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    import torch

    Tensor = torch.Tensor

    # The schema comes from these annotations, so they are real types, not strings.
    def attention_fwd(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float,
                      kernel: str) -> tuple[Tensor, Tensor]:
        return _fwd_impl(q, k, v, softmax_scale, kernel)

    def attention_fwd_fake(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float,
                           kernel: str) -> tuple[Tensor, Tensor]:
        return _fwd_fake(q, k, v, softmax_scale, kernel)

    op = torch.library.custom_op("attngen::attention_fwd", mutates_args=(), device_types="cuda")(attention_fwd)
    op.register_fake(attention_fwd_fake)
    _REGISTERED = True


def attention_fwd(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", softmax_scale: float,
                  kernel: str) -> "tuple[torch.Tensor, torch.Tensor]":
    import torch

    ensure_registered()
    return torch.ops.attngen.attention_fwd(q, k, v, softmax_scale, kernel)
