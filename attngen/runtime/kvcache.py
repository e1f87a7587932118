"""Attention over a KV cache, as flash_attn_with_kvcache: new keys and values are written into the cache in
place, then each query attends to its entry's first cache_seqlens[b] + seqlen_new keys (bottom-right aligned,
so a causal mask lets the last query see every key).

The cache is either contiguous, k_cache (batch, capacity, kv_heads, head_dim), or paged: a pool
(num_blocks, page_size, kv_heads, head_dim) and an int32 block_table (batch, max_blocks) whose row b lists the
pool blocks that hold entry b's keys in order. Queries of at most 16 rows run the split-KV decode kernels, which
read either cache in place; longer ones run the forward kernels over a contiguous view (a paged cache's blocks
gathered first).

A decode loop repeats its shapes, so an eager decode call is remembered by the metadata of its tensors (shapes,
strides, dtypes, devices) and options: a call that matches one already checked and prepared skips straight to
its ReadyDecode (runtime.decode), checking only what can differ between such calls (the pointers' alignment).

The values of the lengths and the block table sit on the GPU. The decode kernels check them themselves and the
call reports what earlier calls' kernels found (runtime.device_checks: no sync); ATTNGEN_HOST_CHECKS=1 adds a
host check at each call. Calls that run the forward kernels or append keys check them on the host unless
ATTNGEN_TRUST_SEQLENS=1 (an append with a bad length would write outside the cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .. import env
from ..planning.planner_decode import PAGE_SIZES, PAGE_SIZES_TEXT
from . import device_checks
from .seqlens import check_used_keys

if TYPE_CHECKING:
    import torch

    from ..spec.model import AttentionSpec
    from .decode import ReadyDecode
    from .variant_args import KernelVariant, VariantArgs


class _Keyed(Protocol):
    key: str


class CacheKernel(Protocol):
    """What attend needs of a kernel (runtime.kernel.AttentionKernel): its spec and variant arguments, the checks of
    q's GPU and the decode path's, its kernels' keys, and the calls it already prepared."""

    spec: AttentionSpec
    variant: KernelVariant
    decode_calls: dict[Any, Any]

    def arch_and_scale(self, q: Any, softmax_scale: float | None) -> float: ...
    def decode_serves(self, device: Any) -> bool: ...
    def decode_key(self) -> str: ...
    def decode_kernels(self) -> Any: ...
    def varlen_kernel(self) -> _Keyed: ...


#: Remembered decode calls per kernel; past this many shapes the memory starts over.
REMEMBERED_CALLS = 256


@dataclass(frozen=True)
class CacheShape:
    """The cache as the call describes it: rows per entry (`capacity`), and the page size when paged."""

    capacity: int
    page_size: int = 0

    @property
    def paged(self) -> bool:
        return self.page_size > 0


@dataclass(frozen=True)
class RememberedCall:
    """A checked decode call's shape-dependent results: the prepared launches, the softmax scale, the variant's
    prepared arguments (a remembered call passes none: only computed ones, which depend on its shapes), and what
    the lengths' and table's values are checked against (the cache's rows per entry, the pool's blocks)."""

    ready: ReadyDecode
    scale: float
    args: VariantArgs
    capacity: int
    blocks: int

    def run(self, q: Any, k_cache: Any, v_cache: Any, used: Any, block_table: Any) -> Any:
        device_checks.raise_pending(q.device.index)
        if env.host_checks():
            check_used_keys(used, q.shape[0], self.capacity, q.device, True)
            if block_table is not None:
                _check_table_values(block_table, self.blocks)
        return self.ready.run(q, k_cache, v_cache, used, block_table, self.scale, self.args)


def attend(kernel: CacheKernel, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *,
           cache_seqlens: torch.Tensor | int, k_new: torch.Tensor | None = None, v_new: torch.Tensor | None = None,
           block_table: torch.Tensor | None = None, softmax_scale: float | None = None, return_lse: bool = False,
           split_kv: bool | None = None, num_splits: int = 0, **variant_args: Any) -> Any:
    """q (batch, seqlen_q, heads, head_dim) over the cache; out like q, and with `return_lse` the LSE
    (batch, heads, seqlen_q). `cache_seqlens`: keys already in each entry's cache (int32 (batch,) or an int);
    `k_new`/`v_new` (batch, seqlen_new, kv_heads, head_dim) are appended at those positions first. No gradient.

    Queries of at most MAX_DECODE_QUERY rows run the split-KV decode kernels, which read a paged cache in place
    (`split_kv=None`); `split_kv=False` runs the forward kernels (a paged cache is then gathered first), True
    insists on the decode kernels. `num_splits` (0: the planner's choice) fixes the decode kernels' KV splits."""
    import torch

    from . import op
    from .checks import check_tensor
    from .op import aligned_rows
    from .variant_args import validate

    key = _call_key(q, k_cache, v_cache, cache_seqlens, block_table, (softmax_scale, split_kv, num_splits)) \
        if k_new is None and v_new is None and not variant_args else None
    remembered = kernel.decode_calls.get(key) if key is not None else None
    if remembered is not None and _pointers_aligned(q, k_cache, v_cache):
        out, lse = remembered.run(q, k_cache, v_cache, cache_seqlens, block_table)
        return (out, lse) if return_lse else out
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        check_tensor(name, t, kernel.spec)
        if t.device != q.device:
            raise ValueError(f"{name} must be on {q.device} with q, got a tensor on {t.device}")
    shape = _check_cache(q, k_cache, v_cache, block_table)
    if q.shape[2] % k_cache.shape[2]:
        raise ValueError(f"q's heads ({q.shape[2]}) must be a multiple of the cache's kv_heads ({k_cache.shape[2]})")
    scale = kernel.arch_and_scale(q, softmax_scale)
    new = _check_new(k_new, v_new, q, k_cache)
    lengths = _lengths(cache_seqlens, q, new, shape.capacity)
    used = lengths + new if new else lengths   # int32 (checked): each entry's keys once k_new is appended
    decode = _use_decode(q, split_kv, num_splits) and (split_kv or kernel.decode_serves(q.device))
    # The decode kernels check the values themselves (runtime.device_checks); an append or the forward kernels
    # need them checked here.
    on_host = env.host_checks() if decode and not new else env.check_seqlens()
    check_used_keys(used, q.shape[0], shape.capacity, q.device, on_host)
    if on_host and shape.paged:
        _check_table_values(block_table, k_cache.shape[0])
    if decode:
        device_checks.raise_pending(q.device.index)
    with torch.no_grad():
        if new:
            _append(k_cache, v_cache, k_new, v_new, lengths, block_table, shape)
        if decode:
            sizes = {"batch": q.shape[0], "heads": q.shape[2], "kv_heads": k_cache.shape[2], "seqlen_q": q.shape[1],
                     "seqlen_k": shape.capacity}
            extras, scalars = validate(kernel.variant.arguments, q, k_cache, variant_args, kernel.spec.name, sizes)
            if key is not None and all(aligned_rows(t) for t in (q, k_cache, v_cache)):
                remembered = _remember(kernel, key, q, k_cache, v_cache, block_table, scale, num_splits, shape)
                out, lse = remembered.ready.run(q, k_cache, v_cache, used, block_table, scale, remembered.args)
            else:
                out, lse = op.decode_fwd(q, k_cache, v_cache, used, block_table, scale, kernel.decode_key(), extras,
                                         scalars, num_splits)
            return (out, lse) if return_lse else out
        k, v = (_gather(t, block_table, shape) for t in (k_cache, v_cache))
        extras, scalars = validate(kernel.variant.arguments, q, k, variant_args, kernel.spec.name)
        out, lse = op.attention_fwd(q, k, v, scale, kernel.varlen_kernel().key, extras, scalars,
                                    (None, None, used, 0, 0))
    return (out, lse) if return_lse else out


def _use_decode(q: Any, split_kv: bool | None, num_splits: Any) -> bool:
    """Whether the call runs the split-KV decode kernels (see `attend`)."""
    from ..planning.planner_decode import MAX_DECODE_QUERY
    from ..planning.splits import MAX_SPLITS

    if split_kv not in (None, True, False):
        raise ValueError(f"split_kv must be None (automatic), True or False, got {split_kv!r}")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be an int from 0 (automatic) to {MAX_SPLITS}, got {num_splits!r}")
    short = q.shape[1] <= MAX_DECODE_QUERY
    if split_kv and not short:
        raise ValueError(f"split_kv=True: the decode kernels take at most {MAX_DECODE_QUERY} queries per entry, "
                         f"q has {q.shape[1]}; leave split_kv out to run the forward kernels")
    if num_splits and (split_kv is False or not short):
        raise ValueError(f"num_splits applies to the split-KV decode kernels (at most {MAX_DECODE_QUERY} queries, "
                         f"split_kv not False); got {q.shape[1]} queries with split_kv={split_kv}")
    return short if split_kv is None else split_kv


def _check_cache(q: Any, k_cache: Any, v_cache: Any, block_table: Any) -> CacheShape:
    import torch

    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-D tensor (batch, capacity, kv_heads, head_dim), or a paged pool "
                             f"(num_blocks, page_size, kv_heads, head_dim) with block_table; got {got}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    if block_table is None:
        if k_cache.shape[0] != q.shape[0]:
            raise ValueError(f"k_cache must hold one entry per batch entry of q ({q.shape[0]}), got {k_cache.shape[0]}")
        return CacheShape(capacity=k_cache.shape[1])
    if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2 \
            or block_table.shape[0] != q.shape[0] or block_table.device != q.device:
        got = f"{block_table.dtype} {tuple(block_table.shape)}" if isinstance(block_table, torch.Tensor) \
            else type(block_table).__name__
        raise ValueError(f"block_table must be an int32 tensor (batch={q.shape[0]}, max_blocks) on {q.device}, "
                         f"got {got}")
    page = k_cache.shape[1]
    if page not in PAGE_SIZES:
        raise ValueError(f"a paged cache's page_size (k_cache.shape[1]) must be {PAGE_SIZES_TEXT}, "
                         f"got {page}")
    return CacheShape(capacity=block_table.shape[1] * page, page_size=page)


def _check_table_values(block_table: Any, blocks: int) -> None:
    """Every entry of the block table indexes one of the pool's `blocks` blocks (one sync)."""
    if block_table.numel():
        lo, hi = int(block_table.min()), int(block_table.max())
        if lo < 0 or hi >= blocks:
            raise ValueError(f"block_table's entries must index the pool's {blocks} blocks, got values "
                             f"from {lo} to {hi}")


def _call_key(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, block_table: Any,
              options: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What an eager decode call's checks and launches depend on, beside the pointers and values: each tensor's
    shape, strides, dtype and device, and the call's options (with their types: True is not 1 here). None (the
    checked path) while torch.compile traces, and for anything but plain tensors (subclasses, an int
    cache_seqlens) and plain options."""
    import torch

    if torch.compiler.is_compiling() or any(type(o) not in _OPTION_TYPES for o in options):
        return None
    key: list[Any] = [tuple((type(o), o) for o in options)]
    for t in (q, k_cache, v_cache, cache_seqlens, block_table):
        if type(t) is torch.Tensor:
            key.append((t.shape, t.stride(), t.dtype, t.device))
        elif t is block_table is None:
            key.append(None)
        else:
            return None
    return tuple(key)


#: The option types a remembered call's key holds (anything else takes the checked path, which says what is wrong).
_OPTION_TYPES = (type(None), bool, int, float)


def _pointers_aligned(*tensors: Any) -> bool:
    """The kernels read 16-byte aligned rows (the strides are in the call's key; the pointers can differ)."""
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def _remember(kernel: CacheKernel, key: tuple[Any, ...], q: Any, k_cache: Any, v_cache: Any, block_table: Any,
              scale: float, num_splits: int, shape: CacheShape) -> RememberedCall:
    """Prepare a checked call's launches (its tensors' rows aligned) and keep them under its key."""
    decode = kernel.decode_kernels()
    remembered = RememberedCall(ready=decode.ready(q, k_cache, v_cache, block_table, num_splits), scale=scale,
                                args=decode.args(q, [], []), capacity=shape.capacity,
                                blocks=k_cache.shape[0] if shape.paged else 0)
    if len(kernel.decode_calls) >= REMEMBERED_CALLS:
        kernel.decode_calls.clear()
    kernel.decode_calls[key] = remembered
    return remembered


def _lengths(cache_seqlens: Any, q: Any, new: int, capacity: int) -> Any:
    """cache_seqlens as an int32 tensor (batch,); an int is checked here (its value needs no sync)."""
    import torch

    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        if not 0 <= cache_seqlens + new <= capacity:
            raise ValueError(f"cache_seqlens (plus the new keys) must lie in [0, {capacity}] (the cache's rows), "
                             f"got {cache_seqlens} + {new}")
        return torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    if not isinstance(cache_seqlens, torch.Tensor):
        got = type(cache_seqlens).__name__
        raise ValueError(f"cache_seqlens must be an int or an int32 tensor (batch,), got {got}")
    return cache_seqlens


def _check_new(k_new: Any, v_new: Any, q: Any, k_cache: Any) -> int:
    """The rows appended per entry (0 without k_new)."""
    if k_new is None and v_new is None:
        return 0
    if k_new is None or v_new is None:
        raise ValueError("k_new and v_new come together: pass both or neither")
    want = (q.shape[0], k_new.shape[1], k_cache.shape[2], k_cache.shape[3])
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if t.dim() != 4 or tuple(t.shape) != want or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must be a {q.dtype} tensor of shape (batch, seqlen_new, kv_heads, head_dim) = "
                             f"{want} on {q.device}, got {t.dtype} {tuple(t.shape)} on {t.device}")
    return int(k_new.shape[1])


def _append(k_cache: Any, v_cache: Any, k_new: Any, v_new: Any, lengths: Any, block_table: Any,
            shape: CacheShape) -> None:
    """Write k_new/v_new at rows lengths[b] + j of each entry, in place."""
    import torch

    batch, rows = k_new.shape[0], k_new.shape[1]
    pos = lengths.long()[:, None] + torch.arange(rows, device=k_new.device)[None, :]
    entry = torch.arange(batch, device=k_new.device)[:, None].expand(batch, rows)
    if shape.paged:
        blocks = block_table.long()[entry, pos // shape.page_size]
        at = (blocks, pos % shape.page_size)
    else:
        at = (entry, pos)
    k_cache.index_put_(at, k_new)
    v_cache.index_put_(at, v_new)


def _gather(pool: Any, block_table: Any, shape: CacheShape) -> Any:
    """A contiguous (batch, capacity, kv_heads, head_dim) view of the cache: the table's blocks in order."""
    if not shape.paged:
        return pool
    batch, blocks = block_table.shape
    return pool[block_table.long()].reshape(batch, blocks * shape.page_size, pool.shape[2], pool.shape[3])
