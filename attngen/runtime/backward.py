"""The backward launcher: preprocess, dK/dV and dQ kernels of one spec, on PyTorch's stream."""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from ..codegen.abi import BWD_PARAMS, HOPPER_BWD_PARAMS, ctypes_struct, set_strides
from ..spec.model import Arch, AttentionSpec
from ..toolchain.artifacts import Cubin

if TYPE_CHECKING:
    import torch

_Params = ctypes_struct(BWD_PARAMS, "BwdParams")
_HopperParams = ctypes_struct(HOPPER_BWD_PARAMS, "HopperBwdParams")
PRE_THREADS = 128


class BackwardKernels:
    """Compiles the backward cubin of `spec` for an arch on first use, loads it once per device."""

    def __init__(self, spec: AttentionSpec) -> None:
        self.spec = spec
        self.cubins: dict[Arch, Cubin] = {}
        self._loaded: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()

    def cubin(self, arch: Arch) -> Cubin:
        with self._lock:
            if arch not in self.cubins:
                from ..toolchain.builder import build_bwd

                self.cubins[arch] = build_bwd(self.spec, arch)
            return self.cubins[arch]

    def _function(self, device_index: int, arch: Arch, entry: str, smem: int) -> Any:
        key = (device_index, entry)
        fn = self._loaded.get(key)
        if fn is None:
            from .driver import load_function

            fn = load_function(self.cubin(arch).data, entry, smem, device_index)
            self._loaded[key] = fn
        return fn

    def __call__(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, dlse: torch.Tensor | None, softmax_scale: float) -> tuple[torch.Tensor, ...]:
        import torch

        from .driver import launch
        from .kernel import current_arch

        arch = current_arch(q.device)
        plan = self.cubin(arch).source.plan
        pre, dkdv, dq_entry = plan.entry_names[:3]  # type: ignore[attr-defined]
        hopper = plan.hopper  # type: ignore[attr-defined]
        if hopper is not None:
            from .tma import describable

            # A view TMA cannot address (a stride-0 broadcast, say) goes in as a contiguous copy.
            q, k, v, dout = (t if describable(t) else t.contiguous() for t in (q, k, v, dout))
        batch, seqlen_q, heads, _ = q.shape
        seqlen_k, kv_heads = k.shape[1], k.shape[2]
        delta = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
        atomic = plan.dq_atomic or hopper is not None  # type: ignore[attr-defined]
        dq_accum = torch.zeros((batch, seqlen_q, heads, q.shape[-1]), dtype=torch.float32, device=q.device) \
            if atomic else delta
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        dk = torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty_like(v, memory_format=torch.contiguous_format)
        fields = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(), dout=dout.data_ptr(),
                      lse=lse.data_ptr(), delta=delta.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(),
                      dv=dv.data_ptr(), dq_accum=dq_accum.data_ptr(), seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                      heads=heads, kv_heads=kv_heads,
                      scale_log2=softmax_scale * math.log2(math.e), softmax_scale=softmax_scale)
        params = _Params(**fields)
        set_strides(params, q=q, k=k, v=v, o=out, dout=dout, dq=dq, dk=dk, dv=dv)
        if hopper is not None:
            from ..codegen import wgmma
            from . import tma

            # The wgmma kernel's block: the four tensor maps, then the same fields.
            hopper_params = _HopperParams(**fields)
            set_strides(hopper_params, q=q, k=k, v=v, o=out, dout=dout, dq=dq, dk=dk, dv=dv)
            for field, t, rows in (("tma_q", q, hopper.block_m), ("tma_do", dout, hopper.block_m),
                                   ("tma_k", k, hopper.block_n), ("tma_v", v, hopper.block_n)):
                tma.fill(hopper_params, field, tma.tensor_map(tma.map_key(t, rows)))
            # dQ boxes: one warpgroup's wgmma rows (64) by 128 bytes of fp32 columns.
            tma.fill(hopper_params, "tma_dq_accum", tma.tensor_map(tma.map_key(dq_accum, wgmma.M)))
        device = q.device.index or 0
        stream = torch.cuda.current_stream(q.device).cuda_stream
        rows = plan.preprocess_rows  # type: ignore[attr-defined]
        if seqlen_q:
            launch(self._function(device, arch, pre, 0), (-(-seqlen_q // rows), heads, batch), PRE_THREADS,
                   stream, params)
        if dlse is not None:
            # d lse / d S = P: the LSE's gradient enters dS = P (dP - D) as D - dlse.
            delta.sub_(dlse)
        a, b = plan.dkdv, plan.dq  # type: ignore[attr-defined]
        grid_kv = (-(-seqlen_k // a.block_n) * (q.shape[-1] // a.d_chunk), kv_heads, batch)
        if seqlen_k and hopper is not None:
            grid_hb = (-(-seqlen_k // hopper.block_n), kv_heads, batch)
            launch(self._function(device, arch, plan.wgmma_entry, hopper.smem_bytes),  # type: ignore[attr-defined]
                   grid_hb, hopper.threads, stream, hopper_params)
        elif seqlen_k:
            launch(self._function(device, arch, dkdv, a.smem_bytes), grid_kv, a.num_warps * 32, stream, params)
        if atomic:
            torch.mul(dq_accum, softmax_scale, out=dq_accum)
            dq.copy_(dq_accum)  # the conversion step: fp32 accumulator to the input dtype
        elif seqlen_q:
            grid_q = (-(-seqlen_q // b.block_m) * (q.shape[-1] // b.d_chunk), heads, batch)
            launch(self._function(device, arch, dq_entry, b.smem_bytes), grid_q, b.num_warps * 32, stream, params)
        if not seqlen_k:
            dq.zero_()  # no key: attention is constant 0, every gradient is 0
        return dq, dk, dv
