"""The implementations under test: attngen, torch SDPA's flash / cuDNN / efficient backends, FlexAttention and
FlashAttention-4 (`flash_attn.cute`, pip flash-attn-4) where it imports.

Each one's `prepare(cfg, q, k, v)` returns a callable that runs one forward pass of the same inputs
(q, k, v of shape (batch, seqlen, heads, head_dim)) and gives the output in that layout. SDPA takes
transposed views of those tensors; FlexAttention takes contiguous (batch, heads, seqlen, head_dim)
copies, its native layout. `Unavailable` says that an implementation cannot run here, and why.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from .model import Config

if TYPE_CHECKING:
    import torch

Forward = Callable[[], "torch.Tensor"]
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
#: torch.compile compiles FlexAttention once per shape; past the recompile limit dynamo would run
#: the unfused eager path (or, with fail_on_recompile_limit_hit, raise).
DYNAMO_RECOMPILE_LIMIT = 256


class Unavailable(Exception):
    """The implementation cannot run in this process (missing backend, unsupported shape)."""


class Impl(Protocol):
    name: str

    def prepare(self, cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Forward: ...


# ---- attngen ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _cache_dir(path: str) -> Iterator[None]:
    old = os.environ.get("ATTNGEN_CACHE_DIR")
    os.environ["ATTNGEN_CACHE_DIR"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("ATTNGEN_CACHE_DIR", None)
        else:
            os.environ["ATTNGEN_CACHE_DIR"] = old


def compile_attngen(head_dim: int, causal: bool, dtype: str, arch: Any = None) -> tuple[Any, dict[str, Any]]:
    """Compile one variant; its cold build time (fresh cache) and its load time from the cache.

    Cold: attngen.build(spec, arch) (plan, render, NVRTC) into an empty ATTNGEN_CACHE_DIR. Load: a
    second attngen.compile of the same spec, which finds the cubin in that cache.
    """
    import attngen
    from attngen.runtime.kernel import current_arch

    spec = attngen.AttentionSpec(head_dim=head_dim, dtype=dtype, mask="causal" if causal else "none")
    arch = attngen.Arch(arch) if arch is not None else current_arch()
    from attngen.runtime import op

    # One-time process set-up (importing torch, registering the op) is not part of a cache load.
    op.ensure_registered()
    with tempfile.TemporaryDirectory(prefix="attngen-bench-") as tmp, _cache_dir(tmp):
        start = time.perf_counter()
        cold = attngen.build(spec, arch)
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        kernel = attngen.compile(spec, arch)
        load_ms = (time.perf_counter() - start) * 1e3
    cubin = kernel.cubins[arch]
    info = {"head_dim": head_dim, "causal": causal, "spec": spec.name, "arch": arch.value,
            "cold_compile_s": cold_s, "cold_from_cache": cold.from_cache, "load_ms": load_ms,
            "load_from_cache": cubin.from_cache, "nvrtc": cubin.nvrtc_version,
            "resources": [r.as_manifest() for r in cubin.resources], "plan": cubin.source.plan.summary()}
    return kernel, info


class AttngenImpl:
    """One compiled AttentionKernel per (head_dim, causal), called as kernel(q, k, v)."""

    name = "attngen"

    def __init__(self, kernel: Any, error: str | None = None) -> None:
        self.kernel = kernel
        self.error = error

    def prepare(self, cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Forward:
        if self.kernel is None:
            raise Unavailable(f"compile failed: {self.error}")
        kernel = self.kernel
        return lambda: kernel(q, k, v)


# ---- torch SDPA -------------------------------------------------------------------------------


class SdpaImpl:
    """torch.nn.functional.scaled_dot_product_attention restricted to one backend."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.backend = SDPA_BACKENDS[name]

    def prepare(self, cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Forward:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, self.backend, None)
        if backend is None:
            raise Unavailable(f"this torch has no SDPBackend.{self.backend}")
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        causal = cfg.causal

        def forward() -> torch.Tensor:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)

        return forward


# ---- FlexAttention ----------------------------------------------------------------------------


def _causal_mask(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return q_idx >= kv_idx


def raise_dynamo_limits() -> dict[str, Any]:
    """Room for one compile per shape, and an error (not the unfused path) past it."""
    import torch._dynamo

    cfg = torch._dynamo.config
    keys = cfg.get_config_copy() if hasattr(cfg, "get_config_copy") else {}
    changed: dict[str, Any] = {}
    for name, value in (("cache_size_limit", DYNAMO_RECOMPILE_LIMIT), ("recompile_limit", DYNAMO_RECOMPILE_LIMIT),
                        ("accumulated_cache_size_limit", 8 * DYNAMO_RECOMPILE_LIMIT),
                        ("accumulated_recompile_limit", 8 * DYNAMO_RECOMPILE_LIMIT)):
        if name in keys or (not keys and hasattr(cfg, name)):
            setattr(cfg, name, max(int(getattr(cfg, name)), value))
            changed[name] = getattr(cfg, name)
    if "fail_on_recompile_limit_hit" in keys:
        cfg.fail_on_recompile_limit_hit = True
        changed["fail_on_recompile_limit_hit"] = True
    return changed


class FlexImpl:
    """flex_attention under torch.compile; causal through a block mask of a causal mask_mod."""

    name = "flex"

    def __init__(self) -> None:
        self._compiled: Any = None
        self.dynamo_config: dict[str, Any] = {}

    def _flex(self) -> Any:
        if self._compiled is None:
            import torch

            try:
                from torch.nn.attention.flex_attention import flex_attention
            except ImportError as exc:
                raise Unavailable(f"this torch has no FlexAttention ({exc})") from exc
            self.dynamo_config = raise_dynamo_limits()
            self._compiled = torch.compile(flex_attention, dynamic=False)
        return self._compiled

    def prepare(self, cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Forward:
        flex = self._flex()
        from torch.nn.attention.flex_attention import create_block_mask

        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        block_mask = None
        if cfg.causal:
            block_mask = create_block_mask(_causal_mask, None, None, cfg.seqlen, cfg.seqlen, device=q.device)
        return lambda: flex(qt, kt, vt, block_mask=block_mask).transpose(1, 2)


# ---- FlashAttention-4 ---------------------------------------------------------------------------


def fa4() -> Any:
    """The flash_attn.cute module (FlashAttention-4); Unavailable when it, or the CUDA toolchain it needs, does
    not import."""
    try:
        import flash_attn.cute as module
    except Exception as exc:  # absent, or its CUDA toolchain is
        raise Unavailable(f"flash_attn.cute does not import ({type(exc).__name__}: {exc})") from None
    return module


def first(out: Any) -> Any:
    """The output of a call that may also return its LSE."""
    return out[0] if isinstance(out, tuple) else out


class Fa4Impl:
    """FlashAttention-4's flash_attn_func on q, k, v in their own (batch, seqlen, heads, head_dim) layout (FA4's)."""

    name = "fa4"

    def prepare(self, cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Forward:
        attend = fa4().flash_attn_func
        return lambda: first(attend(q, k, v, causal=cfg.causal))


def make_peers(names: tuple[str, ...]) -> list[Impl]:
    """The peer implementations named (from model.PEERS), in that order."""
    out: list[Impl] = []
    for name in names:
        out.append(FlexImpl() if name == "flex" else Fa4Impl() if name == "fa4" else SdpaImpl(name))
    return out
