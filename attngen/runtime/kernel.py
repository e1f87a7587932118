"""AttentionKernel: the compiled, callable end of the pipeline (`attngen.compile`)."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from .. import env
from ..features.dtype import dtype_trait
from ..features.variant import variant_of
from ..spec.model import Arch, AttentionSpec, SeqlensKind
from ..toolchain.artifacts import Cubin
from . import op
from . import variant_args as variant_args_mod
from .checks import check_tensor, softmax_scale_of
from .descale import NAMES as DESCALE_NAMES
from .descale import pack_descales
from .device import current_arch, stream_handle
from .forward import FwdCall
from .prepared import ReadyCache
from .seqlens import Seqlens, check_packed
from .variant_args import KernelVariant

if TYPE_CHECKING:
    import torch

MAX_GRID_YZ = 65535


class AttentionKernel:
    """Exact softmax attention for one spec, compiled for one or more arches.

    `kernel(q, k, v)` with q (batch, seqlen_q, heads, head_dim) and k, v (batch, seqlen_k, kv_heads,
    head_dim) returns out like q; with `return_lse=True` also the float32 natural-log LSE
    (batch, heads, seqlen_q). The spec's runtime tensors and scalars are keyword arguments
    (`kernel(q, k, v, doc=doc_ids)`, `kernel(q, k, v, sinks=s)`).
    """

    def __init__(self, spec: AttentionSpec, cubins: dict[Arch, Cubin]) -> None:
        self.spec = spec
        self.cubins = dict(cubins)
        self.key = f"{spec.name}-{'-'.join(sorted(c.cache_key[:12] or a.value for a, c in cubins.items()))}"
        self._loaded: dict[int, Any] = {}
        #: The runtime tensors and scalars a call takes and the fields they fill (derived once, never while
        #: torch.compile traces or a launch runs).
        self.variant = KernelVariant.of(variant_of(spec))
        self._lock = threading.Lock()
        #: The varlen twin (spec `seqlens: varlen`) that packed and KV-cache calls run, built on the first one.
        self._twin: AttentionKernel | None = None
        #: The split-KV decode kernels of KV-cache calls with short queries (runtime.decode), made on first use.
        self._decode: Any = None
        self._decode_serves: dict[Arch, bool] = {}
        #: Eager KV-cache calls already checked and prepared, by their tensors' metadata (runtime.kvcache).
        self.decode_calls: dict[Any, Any] = {}
        #: The forward's launches prepared for the last few call geometries (runtime.prepared).
        self.ready: ReadyCache[Any] = ReadyCache()
        from .backward import BackwardKernels

        #: The backward kernels, compiled on the first backward through this kernel.
        self.backward = BackwardKernels(spec)
        op.register_launcher(self.key, self._launch, self.backward)

    @property
    def arches(self) -> tuple[Arch, ...]:
        return tuple(self.cubins)

    def __repr__(self) -> str:
        arches = ",".join(a.value for a in self.arches)
        return f"AttentionKernel({self.spec.name}, arch={arches})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, softmax_scale: float | None = None,
                 return_lse: bool = False, cu_seqlens_q: torch.Tensor | None = None,
                 cu_seqlens_k: torch.Tensor | None = None, max_seqlen_q: int | None = None,
                 max_seqlen_k: int | None = None, **variant_args: Any) -> Any:
        """Dense: q (batch, seqlen_q, heads, d), k and v (batch, seqlen_k, kv_heads, d); LSE (batch, heads,
        seqlen_q). Packed (flash_attn_varlen_func): q (total_q, heads, d), k and v (total_k, kv_heads, d) with int32
        cu_seqlens_q / cu_seqlens_k of batch + 1 cumulative lengths and the longest lengths max_seqlen_q /
        max_seqlen_k; every mask and score mod applies per sequence; LSE (heads, total_q)."""
        packed = cu_seqlens_q is not None or cu_seqlens_k is not None
        descaled = dtype_trait(self.spec.dtype).descaled
        descales = {n: variant_args.pop(n) for n in DESCALE_NAMES if n in variant_args}
        if descales and not descaled:
            raise ValueError(f"{', '.join(descales)}: descale factors apply to fp8 specs only; spec "
                             f"'{self.spec.name}' is {self.spec.dtype.value}")
        if packed and descaled:
            raise ValueError(f"cu_seqlens_q / cu_seqlens_k: spec '{self.spec.name}' ({self.spec.dtype.value}) has no "
                             f"packed (varlen) kernel; pass dense (batch, seqlen, heads, head_dim) tensors")
        scale = self._check(q, k, v, softmax_scale, packed)
        seqs = None
        sizes = None
        if packed:
            check_packed(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, env.check_seqlens())
            seqs = (cu_seqlens_q, cu_seqlens_k, None, int(max_seqlen_q or 0), int(max_seqlen_k or 0))
            sizes = Seqlens.packed(q, cu_seqlens_q, cu_seqlens_k, *seqs[3:]).sizes(k.shape[1])
        elif max_seqlen_q is not None or max_seqlen_k is not None:
            raise ValueError("max_seqlen_q and max_seqlen_k describe packed sequences: pass them with cu_seqlens_q "
                             "and cu_seqlens_k (q of shape (total_q, heads, head_dim)), or leave them out")
        extras, scalars = variant_args_mod.validate(self.variant.arguments, q, k, variant_args, self.spec.name,
                                                    sizes)
        key = self.varlen_kernel().key if packed else self.key
        if descaled:
            extras = [*extras, pack_descales(q, k, descales)]  # the launcher takes it back off (the last extra)
        out, lse = op.attention_fwd(q, k, v, scale, key, extras, scalars, seqs)
        return (out, lse) if return_lse else out

    def grads_given(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                    lse: torch.Tensor, *, softmax_scale: float | None = None,
                    **variant_args: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dq, dk, dv) of a dense call whose rows' output `out` and LSE `lse` (batch, heads, seqlen_q) are given:
        those of this call, or of a longer key sequence k and v are a part of (context-parallel attention adds
        the parts' gradients up). Runs the backward kernels; the spec's runtime arguments as for a call."""
        import torch

        scale = self._check(q, k, v, softmax_scale)
        for name, t in (("dout", dout), ("out", out)):
            if not isinstance(t, torch.Tensor) or t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
                raise ValueError(f"{name} must be a tensor like q {tuple(q.shape)} {q.dtype}, got "
                                 f"{getattr(t, 'shape', type(t).__name__)}")
        want = (q.shape[0], q.shape[2], q.shape[1])
        if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != want or lse.dtype != torch.float32:
            raise ValueError(f"lse must be a float32 tensor of shape {want} (batch, heads, seqlen_q), got "
                             f"{getattr(lse, 'shape', type(lse).__name__)} {getattr(lse, 'dtype', '')}")
        extras, scalars = variant_args_mod.validate(self.variant.arguments, q, k, variant_args, self.spec.name)
        op.ensure_registered()
        dq, dk, dv, _ = torch.ops.attngen.attention_bwd(dout, q, k, v, out, lse, None, scale, self.key, extras,
                                                        scalars, None, None, None, 0, 0)
        return dq, dk, dv

    def varlen_kernel(self) -> AttentionKernel:
        """The kernel for per-entry lengths (packed sequences, KV caches): this one when its spec says
        `seqlens: varlen`, else its twin, built for the same arches on first use."""
        if self.spec.seqlens is SeqlensKind.varlen:
            return self
        with self._lock:
            if self._twin is None:
                from ..toolchain.builder import build

                twin = self.spec.with_seqlens(SeqlensKind.varlen)
                self._twin = AttentionKernel(twin, {a: build(twin, a) for a in self.arches})
            return self._twin

    def decode_serves(self, device: Any) -> bool:
        """Whether a decode plan of this spec exists for the GPU of `device` (a budget of 99 KB per block holds
        no hd192 or hd256 decode tiles: KV-cache calls there run the forward kernels)."""
        from ..errors import PlanError
        from ..planning.planner_decode import plan_decode

        arch = current_arch(device)
        if arch not in self._decode_serves:
            try:
                plan_decode(self.spec, arch)
                self._decode_serves[arch] = True
            except PlanError:
                self._decode_serves[arch] = False
        return self._decode_serves[arch]

    def decode_key(self) -> str:
        """The op's key of this kernel's split-KV decode kernels (compiled on the first decode call)."""
        self.decode_kernels()
        return f"{self.key}-decode"

    def decode_kernels(self) -> Any:
        """This kernel's split-KV decode kernels (runtime.decode.DecodeKernels), made and registered with the op
        on first use."""
        decode = self._decode
        if decode is None:
            with self._lock:
                if self._decode is None:
                    from .decode import DecodeKernels

                    self._decode = DecodeKernels(self.spec)
                    op.register_decode(f"{self.key}-decode", self._decode)
                decode = self._decode
        return decode

    def with_kvcache(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, **kwargs: Any) -> Any:
        """Attention of q over a KV cache, as flash_attn_with_kvcache (see attngen.runtime.kvcache.attend)."""
        from .kvcache import attend

        return attend(self, q, k_cache, v_cache, **kwargs)

    # ---- validation ---------------------------------------------------------------------------
    def _check(self, q: Any, k: Any, v: Any, softmax_scale: float | None, packed: bool = False) -> float:
        import torch

        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            check_tensor(name, t, self.spec, packed)
        if not (q.device == k.device == v.device):
            raise ValueError(f"q, k and v must be on one device; got {q.device}, {k.device}, {v.device}")
        if packed:
            _check_heads(q.shape[1], k.shape[1], v.shape[1], k.shape[0], v.shape[0])
        else:
            _check_shapes(q, k, v)
        return self.arch_and_scale(q, softmax_scale)

    def arch_and_scale(self, q: Any, softmax_scale: float | None) -> float:
        """Check that this kernel is built for q's GPU; the softmax scale to use."""
        import torch

        arch = current_arch(q.device)
        if arch not in self.cubins:
            built = ", ".join(a.value for a in self.arches)
            raise ValueError(f"this kernel was built for {built}; the tensors are on a {arch.value} GPU "
                             f"({torch.cuda.get_device_name(q.device)}); compile the spec for {arch.value}")
        return softmax_scale_of(softmax_scale, self.spec.head_dim)

    # ---- launch -------------------------------------------------------------------------------
    def _function(self, device_index: int, arch: Arch) -> Any:
        with self._lock:
            fn = self._loaded.get(device_index)
            if fn is None:
                from .driver import load_function

                cubin = self.cubins[arch]
                plan = cubin.source.plan
                fn = load_function(cubin.data, plan.kernel_name, plan.smem_bytes, device_index)
                self._loaded[device_index] = fn
            return fn

    def _launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                softmax_scale: float, extras: list[torch.Tensor], scalars: list[float], seqs: Seqlens) -> None:
        descale = None
        if dtype_trait(self.spec.dtype).descaled:
            *extras, descale = extras
        args = variant_args_mod.prepare(self.variant, q, extras, scalars, seqs.batch)
        args.descale = descale
        call = FwdCall(q=q, k=k, v=v, out=out, lse=lse, softmax_scale=softmax_scale, args=args, seqs=seqs)
        # The family's launch, prepared once per geometry (runtime.prepared), writes the call's parameter block.
        ready = self.ready.get(call.geometry(), lambda: self._prepare(call))
        ready.run(call, stream_handle(q.device.index or 0))

    def _prepare(self, call: FwdCall) -> Any:
        from ..planning.planner import forward_family

        arch = current_arch(call.q.device)
        plan = self.cubins[arch].source.plan
        fn = self._function(call.q.device.index or 0, arch)
        return forward_family(plan.family).prepare(plan, fn, call)


def _check_shapes(q: Any, k: Any, v: Any) -> None:
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have one batch size, got {q.shape[0]} and {k.shape[0]}")
    if q.shape[0] == 0:
        raise ValueError("batch must be at least 1, got an empty batch")
    if q.shape[0] > MAX_GRID_YZ or q.shape[2] > MAX_GRID_YZ:
        raise ValueError(f"batch and heads must be at most {MAX_GRID_YZ}, got {q.shape[0]} and {q.shape[2]}")
    _check_heads(q.shape[2], k.shape[2], v.shape[2], k.shape[1], v.shape[1])


def _check_heads(heads: int, kv_heads: int, v_heads: int, k_rows: int, v_rows: int) -> None:
    if kv_heads != v_heads or k_rows != v_rows:
        raise ValueError(f"k and v must have one shape, got {kv_heads} and {v_heads} heads, {k_rows} and {v_rows} rows")
    if heads > MAX_GRID_YZ:
        raise ValueError(f"heads must be at most {MAX_GRID_YZ}, got {heads}")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"q's heads ({heads}) must be a multiple of k's and v's kv_heads ({kv_heads})")


def compile(spec: AttentionSpec | str | os.PathLike[str], arch: Arch | str | None = None) -> AttentionKernel:  # noqa: A001
    """Build `spec` (an AttentionSpec or a YAML path) for `arch`, the spec's arches, or the current GPU."""
    from ..toolchain.builder import build

    if not isinstance(spec, AttentionSpec):
        from ..spec.loader import load_spec

        spec = load_spec(spec)
    if arch is not None:
        arches: tuple[Arch, ...] = (Arch(arch),)
    elif spec.arch:
        arches = spec.arch
    else:
        arches = (current_arch(),)
    return AttentionKernel(spec, {a: build(spec, a) for a in arches})
