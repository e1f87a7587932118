"""The mma.sync backward's launches, prepared once per call geometry (runtime.prepared): the parameter block's
shape-dependent fields and the grids of the preprocess, the dK/dV kernel and dq_convert or the dQ kernel
(families/sm80_bwd.py plans them). A call allocates its buffers, writes its pointers into a copy of the block and
launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..codegen.abi import BWD_PARAMS, with_variant
from ..planning.ir_bwd import BwdPlan
from ..planning.planner_bwd import LoadFunction

if TYPE_CHECKING:
    import torch

#: Threads of an atomic plan's dq_convert block (kConvertThreads in bwd_dq_convert.cuh.j2).
DQ_CONVERT_THREADS = 128


def prepare(plan: BwdPlan, function: LoadFunction, call: Any) -> ReadySm80Backward:
    """The launches of calls with `call`'s geometry: the preprocess, the dK/dV kernel, and dq_convert (atomic dQ) or
    the dQ kernel, with the parameter block's shape-dependent fields."""
    from ..runtime import backward as rt
    from ..runtime.driver import PreparedLaunch

    seqs = call.seqs
    b = _buffers(plan, call)
    pre, dkdv, dq = plan.entry_names
    head_dim, kv_heads = call.q.shape[3], call.k.shape[2]
    a, t = plan.dkdv, plan.dq
    dkdv_launch = dq_launch = None
    if seqs.seqlen_k:
        grid = (-(-seqs.seqlen_k // a.block_n) * (head_dim // a.d_chunk), kv_heads, seqs.batch)
        dkdv_launch = PreparedLaunch(function(dkdv, a.smem_bytes), grid, a.num_warps * 32)
    if plan.dq_atomic and seqs.seqlen_q:
        # One block per (convert_rows query rows, head, entry) of the group-ordered accumulator.
        dq_launch = PreparedLaunch(function(dq, 0), seqs.grid(convert_rows(a.block_m)), DQ_CONVERT_THREADS)
    elif seqs.seqlen_q:
        grid = (-(-seqs.seqlen_q // t.block_m) * (head_dim // t.d_chunk), seqs.heads, seqs.batch)
        dq_launch = PreparedLaunch(function(dq, t.smem_bytes), grid, t.num_warps * 32)
    params = rt.param_template(with_variant(BWD_PARAMS, call.args.fields), b, call)
    return ReadySm80Backward(plan=plan, params=params,
                             preprocess=rt.preprocess(function, pre, plan.preprocess_rows, seqs, b),
                             dkdv=dkdv_launch, dq=dq_launch)


@dataclass(frozen=True)
class ReadySm80Backward:
    """The mma.sync backward of one geometry, ready to run: its parameter block's shape-dependent fields, the
    preprocess and the dK/dV and dQ kernels' launches (dQ's None where dQ is added up atomically)."""

    plan: BwdPlan
    params: Any
    preprocess: Any
    dkdv: Any
    dq: Any

    def run(self, call: Any, stream: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from ..runtime import backward as rt

        b = _buffers(self.plan, call)
        params = self.params.make(lambda p: rt.call_fields(p, b, call))
        self.preprocess(params, stream, call.seqs)
        for launch in (self.dkdv, self.dq):
            if launch is not None:
                launch(stream, params)
        return rt.finish(b, call.seqs.seqlen_k, call.softmax_scale, converted=self.plan.dq_atomic)


def convert_rows(block_m: int) -> int:
    """Query rows per block of the atomic plan's dq_convert: whole 16-row groups dividing the query step, at most
    64 (its shared tile of rows x (head_dim + 8) 16-bit values stays under 48 KB at hd256)."""
    return min(block_m, 64)


def _buffers(plan: BwdPlan, call: Any) -> Any:
    """The call's buffers: with atomic dQ, D and the LSE padded per entry to the query step and the group-ordered
    accumulator beside them (the preprocess zeroes its rows); else D in the LSE's layout."""
    from ..runtime import backward as rt

    if not plan.dq_atomic:
        return rt.buffers(call.q, call.k, call.v, accumulate=False, dlse=call.dlse)
    return rt.buffers(call.q, call.k, call.v, accumulate=True, entries=call.seqs.batch, pad_rows=plan.dkdv.block_m,
                      dlse=call.dlse, tiled_dq=True, zeroed=False)
