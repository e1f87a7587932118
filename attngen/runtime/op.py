"""The torch.library custom op `attngen::attention_fwd` that every compiled kernel launches through.

The op is registered on first use (never at import). A compiled AttentionKernel registers its
launcher under a key; the op's string argument names it, so torch.compile traces one op for all.
"""

import math
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from .. import env
from .seqlens import Seqlens

#: The sequences of a call as the op carries them: (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
#: max_seqlen_k), the tensors None for a dense batch.
Sequences = tuple[Any, Any, Any, int, int]

if TYPE_CHECKING:
    import torch

#: (q, k, v, out, lse, softmax_scale, extras, scalars, seqs) -> None, launching the kernel into out and lse; extras
#: and scalars are the spec's runtime tensors and scalars in declaration order (attngen.runtime.variant_args);
#: seqs (Seqlens) says where each entry's sequences sit, the tensors are as its `entries` gives them.
Launcher = Callable[..., None]
_LAUNCHERS: dict[str, Launcher] = {}
#: (dout, q, k, v, out, lse, dlse, softmax_scale, extras, scalars, seqs) -> (dq, dk, dv, dsinks); dsinks is empty
#: without sinks.
_BWD_LAUNCHERS: dict[str, Callable[..., Any]] = {}
#: (q, k, v, seqused_k, block_table, softmax_scale, extras, scalars) -> (out, lse): a kernel's decode kernels
#: (attngen.runtime.decode.DecodeKernels) over a KV cache, contiguous or paged.
_DECODE_LAUNCHERS: dict[str, Callable[..., Any]] = {}
_REGISTERED = False


def register_launcher(key: str, launcher: Launcher, backward: Callable[..., Any] | None = None) -> None:
    ensure_registered()
    _LAUNCHERS[key] = launcher
    if backward is not None:
        _BWD_LAUNCHERS[key] = backward


def register_decode(key: str, launcher: Callable[..., Any]) -> None:
    ensure_registered()
    _DECODE_LAUNCHERS[key] = launcher


def _usable(t: Any) -> Any:
    """A tensor the kernels can read: 16-byte aligned rows with a contiguous last dim, else a copy."""
    import torch

    if t.stride(-1) == 1 and aligned_rows(t):
        return t
    return torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)


def aligned_rows(t: "torch.Tensor") -> bool:
    """cp.async moves 16 bytes: the base and every row start must be 16-byte aligned."""
    return t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:-1])


def _eager(*tensors: Any) -> bool:
    """Whether a call runs eagerly on real tensors, so that it may skip the op's dispatch: not under dynamo, and no
    fake or functional tensors (AOTAutograd traces the backward with them outside dynamo's frame)."""
    import torch

    return not torch.compiler.is_compiling() and all(type(t) is torch.Tensor for t in tensors)


def _seqlens(q: Any, k: Any, seqs: Sequences) -> Seqlens:
    cu_q, cu_k, used_k, max_q, max_k = seqs
    if cu_q is not None:
        return Seqlens.packed(q, cu_q, cu_k, max_q, max_k)
    return Seqlens.dense(q, k, used_k)


def _fwd_impl(q: Any, k: Any, v: Any, softmax_scale: float, kernel: str, extras: list[Any],
              scalars: list[float], seqs: Sequences) -> Any:
    import torch

    launcher = _LAUNCHERS.get(kernel)
    if launcher is None:
        raise ValueError(f"kernel '{kernel}' is not loaded in this process; build it with attngen.compile")
    # A fresh allocation is aligned; .contiguous() alone would return a misaligned tensor as it is.
    q, k, v = (_usable(t) for t in (q, k, v))
    info = _seqlens(q, k, seqs)
    fill = math.nan if env.poison_outputs() else None
    out = torch.empty_like(q, dtype=out_dtype(q), memory_format=torch.contiguous_format)
    lse = torch.empty(info.lse_shape(), dtype=torch.float32, device=q.device)
    if fill is not None:
        out.fill_(fill)
        lse.fill_(fill)
    if out.numel():
        q4, k4, v4, out4 = (info.entries(t) for t in (q, k, v, out))
        launcher(q4, k4, v4, out4, info.lse_entries(lse), softmax_scale, extras, scalars, info)
    return out, lse


def _decode_impl(q: Any, k_cache: Any, v_cache: Any, seqused_k: Any, block_table: Any, softmax_scale: float,
                 kernel: str, extras: list[Any], scalars: list[float], num_splits: int) -> Any:
    launcher = _DECODE_LAUNCHERS.get(kernel)
    if launcher is None:
        raise ValueError(f"kernel '{kernel}' has no decode kernels loaded in this process; build it with "
                         f"attngen.compile")
    q, k_cache, v_cache = (_usable(t) for t in (q, k_cache, v_cache))
    return launcher(q, k_cache, v_cache, seqused_k, block_table, softmax_scale, extras, scalars, num_splits)


def _lse_shape(q: Any, seqs: Sequences) -> tuple[int, ...]:
    return (q.shape[1], q.shape[0]) if seqs[0] is not None else (q.shape[0], q.shape[2], q.shape[1])


def _fwd_fake(q: Any, k: Any, v: Any, softmax_scale: float, kernel: str, extras: list[Any],
              scalars: list[float], seqs: Sequences) -> Any:
    import torch

    out = torch.empty_like(q, dtype=out_dtype(q), memory_format=torch.contiguous_format)
    return out, q.new_empty(_lse_shape(q, seqs), dtype=torch.float32)


def out_dtype(q: Any) -> Any:
    """The output's torch dtype for inputs like q (bf16 for fp8, else q's)."""
    import torch

    from ..features.dtype import out_trait, trait_of_torch

    return getattr(torch, out_trait(trait_of_torch(q.dtype)).torch)


def _bwd_impl(dout: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, dlse: Any, softmax_scale: float,
              kernel: str, extras: list[Any], scalars: list[float], seqs: Sequences) -> Any:
    backward = _BWD_LAUNCHERS.get(kernel)
    if backward is None:
        raise ValueError(f"kernel '{kernel}' has no backward loaded in this process; build it with attngen.compile")
    dout, q, k, v, out = (_usable(t) for t in (dout, q, k, v, out))
    info = _seqlens(q, k, seqs)
    if dlse is not None:
        dlse = info.lse_entries(dlse.contiguous())
    dout4, q4, k4, v4, out4 = (info.entries(t) for t in (dout, q, k, v, out))
    dq, dk, dv, dsinks = backward(dout4, q4, k4, v4, out4, info.lse_entries(lse.contiguous()), dlse, softmax_scale,
                                  extras, scalars, info)
    if info.is_packed:
        dq, dk, dv = (t.squeeze(0) for t in (dq, dk, dv))
    return dq, dk, dv, dsinks


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    q, k, v, softmax_scale, kernel, extras, scalars, cu_q, cu_k, used_k, max_q, max_k = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, used_k, *extras)
    ctx.softmax_scale = softmax_scale
    ctx.kernel = kernel
    ctx.scalars = scalars
    ctx.max_seqlens = (max_q, max_k)
    #: Where the sinks tensor sits among the extras (the one extra with a gradient), or -1.
    ctx.sinks_at = next((i for i, t in enumerate(extras) if t.requires_grad), -1)


def _backward(ctx: Any, grad_out: Any, grad_lse: Any) -> tuple[Any, ...]:
    """The op's backward: the gradients of its twelve inputs."""
    dq, dk, dv, grads = _gradients(ctx, grad_out, grad_lse)
    # A list of floats is one leaf when it holds some (None), an empty list when it holds none.
    return (dq, dk, dv, None, None, grads, (None if ctx.scalars else []), None, None, None, None, None)


def _gradients(ctx: Any, grad_out: Any, grad_lse: Any) -> tuple[Any, Any, Any, list[Any]]:
    """dq, dk, dv and the extras' gradients (the sinks', else None) of a call whose context _setup_context wrote."""
    import torch

    q, k, v, out, lse, cu_q, cu_k, used_k, *extras = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    if not _eager(grad_out, q) or torch.is_grad_enabled():
        # Traced graphs hold the op; so does a backward that records a graph (create_graph), which the op refuses.
        dq, dk, dv, dsinks = torch.ops.attngen.attention_bwd(grad_out, q, k, v, out, lse, grad_lse,
                                                             ctx.softmax_scale, ctx.kernel, extras, ctx.scalars,
                                                             cu_q, cu_k, used_k, *ctx.max_seqlens)
    else:
        # Eager: the launcher directly. The op's second dispatch (its autograd and no-grad layers, the dynamo guard)
        # measured ~150-250 us of host time a call on the GPU machine (benchmarks/host_layers.py), more than a short
        # sequence's kernels take.
        dq, dk, dv, dsinks = _bwd_impl(grad_out, q, k, v, out, lse, grad_lse, ctx.softmax_scale, ctx.kernel, extras,
                                       ctx.scalars, (cu_q, cu_k, used_k, *ctx.max_seqlens))
    return dq, dk, dv, [dsinks if i == ctx.sinks_at else None for i in range(len(extras))]


@cache
def _eager_autograd() -> Any:
    """The autograd function of eager calls that record a gradient: the op's forward and backward without its
    dispatch and the custom op's autograd layer (pytree flattening, the redispatch), which cost ~100 us of host time
    a call on the GPU machine (benchmarks/host_layers.py). Traced graphs hold the op."""
    import torch

    class EagerAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, softmax_scale: float, kernel: str, scalars: list[float],
                    seqs: Sequences, *extras: Any) -> Any:
            out, lse = _fwd_impl(q, k, v, softmax_scale, kernel, list(extras), scalars, seqs)
            _setup_context(ctx, (q, k, v, softmax_scale, kernel, list(extras), scalars, *seqs), (out, lse))
            # An unused output's gradient stays None (no zero LSE gradient for the preprocess to subtract).
            ctx.set_materialize_grads(False)
            return out, lse

        @staticmethod
        def backward(ctx: Any, grad_out: Any, grad_lse: Any) -> tuple[Any, ...]:
            dq, dk, dv, grads = _gradients(ctx, grad_out, grad_lse)
            return (dq, dk, dv, None, None, None, None, *grads)

    return EagerAttention


def ensure_registered() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    import torch

    # The schema comes from these annotations, so they are real types, not strings. The trailing five are the
    # sequences (Seqlens): packed cumulative lengths, a KV cache's used keys, the longest packed sequences.
    def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, kernel: str,
                      extras: list[torch.Tensor], scalars: list[float], cu_seqlens_q: torch.Tensor | None,
                      cu_seqlens_k: torch.Tensor | None, seqused_k: torch.Tensor | None, max_seqlen_q: int,
                      max_seqlen_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
        return _fwd_impl(q, k, v, softmax_scale, kernel, extras, scalars, seqs)

    def attention_fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, kernel: str,
                           extras: list[torch.Tensor], scalars: list[float], cu_seqlens_q: torch.Tensor | None,
                           cu_seqlens_k: torch.Tensor | None, seqused_k: torch.Tensor | None, max_seqlen_q: int,
                           max_seqlen_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
        return _fwd_fake(q, k, v, softmax_scale, kernel, extras, scalars, seqs)

    def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                      lse: torch.Tensor, dlse: torch.Tensor | None, softmax_scale: float, kernel: str,
                      extras: list[torch.Tensor], scalars: list[float], cu_seqlens_q: torch.Tensor | None,
                      cu_seqlens_k: torch.Tensor | None, seqused_k: torch.Tensor | None, max_seqlen_q: int,
                      max_seqlen_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        seqs = (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
        return _bwd_impl(dout, q, k, v, out, lse, dlse, softmax_scale, kernel, extras, scalars, seqs)

    def attention_bwd_fake(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                           lse: torch.Tensor, dlse: torch.Tensor | None, softmax_scale: float, kernel: str,
                           extras: list[torch.Tensor], scalars: list[float], cu_seqlens_q: torch.Tensor | None,
                           cu_seqlens_k: torch.Tensor | None, seqused_k: torch.Tensor | None, max_seqlen_q: int,
                           max_seqlen_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        sinks = next((t for t in extras if t.requires_grad), None)
        return (torch.empty_like(q, memory_format=torch.contiguous_format),
                torch.empty_like(k, memory_format=torch.contiguous_format),
                torch.empty_like(v, memory_format=torch.contiguous_format),
                torch.empty_like(sinks) if sinks is not None else q.new_empty((0,), dtype=torch.float32))

    def decode_fwd(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seqused_k: torch.Tensor,
                   block_table: torch.Tensor | None, softmax_scale: float, kernel: str, extras: list[torch.Tensor],
                   scalars: list[float], num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _decode_impl(q, k_cache, v_cache, seqused_k, block_table, softmax_scale, kernel, extras, scalars,
                            num_splits)

    def decode_fwd_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seqused_k: torch.Tensor,
                        block_table: torch.Tensor | None, softmax_scale: float, kernel: str,
                        extras: list[torch.Tensor], scalars: list[float],
                        num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        return out, q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)

    dec = torch.library.custom_op("attngen::decode_fwd", mutates_args=(), device_types="cuda")(decode_fwd)
    dec.register_fake(decode_fwd_fake)
    op = torch.library.custom_op("attngen::attention_fwd", mutates_args=(), device_types="cuda")(attention_fwd)
    op.register_fake(attention_fwd_fake)
    bwd = torch.library.custom_op("attngen::attention_bwd", mutates_args=(), device_types="cuda")(attention_bwd)
    bwd.register_fake(attention_bwd_fake)
    op.register_autograd(_backward, setup_context=_setup_context)
    _REGISTERED = True


def attention_fwd(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", softmax_scale: float, kernel: str,
                  extras: "list[torch.Tensor] | None" = None, scalars: "list[float] | None" = None,
                  seqs: "Sequences | None" = None) -> "tuple[torch.Tensor, torch.Tensor]":
    """The op on (q, k, v); `seqs` (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k) for packed
    sequences or a KV cache's used keys, none for a dense batch."""
    import torch

    ensure_registered()
    cu_q, cu_k, used_k, max_q, max_k = seqs if seqs is not None else (None, None, None, 0, 0)
    extras, scalars = list(extras or []), list(scalars or [])
    if _eager(q, k, v):
        seqs = (cu_q, cu_k, used_k, max_q, max_k)
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *extras)):
            return _eager_autograd().apply(q, k, v, softmax_scale, kernel, scalars, seqs, *extras)
        # Eager without a gradient to record (inference, no_grad): the launcher directly, as decode_fwd.
        return _fwd_impl(q, k, v, softmax_scale, kernel, extras, scalars, seqs)
    return torch.ops.attngen.attention_fwd(q, k, v, softmax_scale, kernel, extras, scalars, cu_q, cu_k, used_k,
                                           max_q, max_k)


def decode_fwd(q: "torch.Tensor", k_cache: "torch.Tensor", v_cache: "torch.Tensor", seqused_k: "torch.Tensor",
               block_table: "torch.Tensor | None", softmax_scale: float, kernel: str,
               extras: "list[torch.Tensor] | None" = None, scalars: "list[float] | None" = None,
               num_splits: int = 0) -> "tuple[torch.Tensor, torch.Tensor]":
    """The decode op: q (batch, seqlen_q <= 16, heads, d) over a KV cache, contiguous or paged (`block_table`);
    `num_splits` 0 lets the decode family choose."""
    import torch

    ensure_registered()
    extras, scalars = list(extras or []), list(scalars or [])
    if not torch.compiler.is_compiling():
        # Eager: the launcher directly (the op's dispatch costs tens of microseconds, a decode step's kernels
        # about as much); traced graphs hold the op.
        return _decode_impl(q, k_cache, v_cache, seqused_k, block_table, softmax_scale, kernel, extras, scalars,
                            num_splits)
    return torch.ops.attngen.decode_fwd(q, k_cache, v_cache, seqused_k, block_table, softmax_scale, kernel, extras,
                                        scalars, num_splits)
