"""The Hopper backward (sm_90a): a warp-specialized wgmma dK/dV kernel that adds dQ up in fp32, after the preprocess
kernel, and (tile-ordered dQ) a dq_convert kernel.

One block owns 128 KV rows of one KV head: a producer warpgroup (TMA: K and V once, then Q and dO tiles through a
ring of stages) and two consumer warpgroups (wgmma) of 64 KV rows each (hd64/128: sm90_bwd_rows.py; hd192: the KV
rows halved, sm90_bwd_halves.py; hd256: head_dim split, sm90_bwd_split.py). By default (DQ_RED, DQ_BULK) each consumer
warpgroup stages its dQ product in shared memory in wgmma fragment order and producer warp 1 adds it with one
contiguous bulk reduction (cp.reduce.async.bulk .add.f32) into a tile-ordered fp32 accumulator
(HopperBwdTiling.dq_red: per-entry padded query tiles, each 64 x 64 box in fragment order), which dq_convert scales
and writes as dQ (without DQ_BULK the consumers add it from registers by red.global.add.v4.f32). The rounding order
of dQ varies from run to run; for deterministic specs (HopperBwdTiling.ordered_dq) producer warp 1 issues the same
bulk reductions (ORDERED_DQ_BULK; else tensor-map reductions into the row-major accumulator), a semaphore per query
tile admitting the KV blocks' reductions one at a time in dispatch order (the ordering needs one issuing warp per
block; the consumers' own reductions could not be ordered without stalling them). The hd192/256 split adds dQ from
registers too (sm90_bwd_split.py; deterministic: each consumer warpgroup waits for a tile's turn before its
reductions). Its cost model is sm90_bwd_cost.py. Its template is attn_bwd_hopper.cu.j2 (the preprocess kernel from
templates/common/bwd_preprocess.cuh.j2, as the mma.sync backward has it), its parameter blocks abi.BWD_PARAMS
(preprocess, dq_convert reads the same fields in the wgmma block) and abi.HOPPER_BWD_PARAMS (TMA maps first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..codegen.abi import BWD_PARAMS, HOPPER_BWD_PARAMS, layout
from ..codegen.wgmma import backward_ops
from ..features.dtype import dtype_trait, with_backward
from ..features.kv_layout import KV_LAYOUTS
from ..features.mask import MASKS
from ..features.variant import params_with_variant
from ..planning.archs import ArchInfo, arch_info
from ..planning.ir_bwd import HopperBwdPlan, HopperBwdTiling
from ..planning.planner_bwd import BackwardFamily, LoadFunction
from ..planning.shared import kernel_name, schedule_words
from ..spec.model import Arch, AttentionSpec, PipelineKind
from .base import Coverage
from .sm90_bwd_cost import dkdv_terms, plan_cost, step_l2_bytes, step_l2_gbps
from .sm90_bwd_halves import halves_line, halves_ops, halves_refusal, halves_tiling
from .sm90_bwd_rows import dq_line, ds_offsets_kept, ds_offsets_xor, layout_lines, rows_tiling, step_parts
from .sm90_bwd_split import split_line, split_ops, split_tiling
from .sm90_tail_order import bwd_tail_waves, order_line

#: The head dims where each consumer warpgroup owns 64 KV rows and all of head_dim: its dK and dV accumulators
#: (head_dim fp32 registers per consumer thread together) leave room for the scores only up to 128. Measured on
#: the H100 at 2k-16k: hd64 1.14-1.31x and hd128 1.17-1.37x FlashAttention-2, against 0.63-0.75x for the
#: mma.sync kernels (benchmarks/results/h100/bwd_hopper/, NOTES.md).
HEAD_DIMS = (64, 128)
#: The head dims the warpgroups split between them (HopperBwdTiling.split; sm90_bwd_split.py).
SPLIT_HEAD_DIMS = (192, 256)
#: The three kernels launched as programmatic dependents (HopperBwdPlan.dependent_launch), as FlashAttention-4's
#: preprocess and sm90 backward are: the dK/dV kernel's blocks start under the preprocess's last wave and load K, V and
#: the first Q and dO tiles before they wait for its D and LSE; dq_convert's launch latency hides under the dK/dV
#: kernel's tail. Prediction: the first wave earlier by the preprocess's tail, a launch and the first loads (~5-10 us a
#: call, +1% at 2k). Off: measured level on the H100 (benchmarks/dependent_launch_ab.py, the same kernels launched
#: both ways in one process, three rounds: x0.975-1.007 at hd64/128/256, 2k and 8k; results/h100/pdl, NOTES.md).
#: Compiled and tested (CPU and GPU) on; a module constant for the device A/B.
DEPENDENT_LAUNCH = False


def tiling(spec: AttentionSpec, info: ArchInfo) -> HopperBwdTiling:
    """The dK/dV tiling of a head dim it serves; PlanError with the arithmetic when the budget cannot hold it."""
    if halves_refusal(spec) is None:
        return halves_tiling(spec, info)
    if spec.head_dim in SPLIT_HEAD_DIMS:
        return split_tiling(spec, info)
    return rows_tiling(spec, info, spec.deterministic)


def _owner_line(t: HopperBwdTiling, head_dim: int) -> str:
    """What each consumer warpgroup owns and how dQ is added, for plan_line and explain."""
    if t.kv_halves:
        return halves_line(t, head_dim)
    return split_line(t) if t.split else dq_line(t)


class Sm90Backward(BackwardFamily):
    name = "sm90_bwd"
    path = ("TMA + wgmma, dQ by bulk reductions into a tile-ordered accumulator (deterministic: the same, in each "
            "tile's turn; hd192: KV-row halves; hd256: head_dim split, staged and vector reductions)")
    template = "attn_bwd_hopper.cu.j2"

    def coverage(self) -> Coverage:
        return Coverage(archs=("sm90",), head_dims=HEAD_DIMS + SPLIT_HEAD_DIMS, dtypes=with_backward(),
                        masks=tuple(m.value for m in MASKS), kv_layouts=tuple(KV_LAYOUTS),
                        pipelines=tuple(k.value for k in PipelineKind),
                        notes="deterministic specs: dQ's reductions ordered by a semaphore per query tile; the "
                              "spec's pipeline picks the forward's only")

    def serves(self, spec: AttentionSpec, arch: Arch) -> str | None:
        if why := self.trait_refusal(spec):
            return why
        if arch_info(arch).wgmma_flops_per_clk == 0:
            return f"{arch.value} has no wgmma"
        if spec.deterministic and schedule_words(spec):
            # The ordered dQ's producer keeps 24 registers: 32 would leave the consumers 232 of the launch's pool,
            # where hd128 unmasked spills 16 B; at 24 only a mask with holes, packed, spills (4 B).
            return ("deterministic with a mask with holes: the ordered dQ's producer spills beside the live-tile "
                    "bitmap's walk")
        if spec.head_dim not in HEAD_DIMS + SPLIT_HEAD_DIMS:
            return (f"head_dim {spec.head_dim}: not a multiple of 64 (the 128-byte TMA boxes), and dK and dV do not "
                    f"fit the consumer registers beside the scores")
        return None

    # ---- planning ------------------------------------------------------------------------------
    def plan(self, spec: AttentionSpec, info: ArchInfo, exclude: Mapping[Any, str] | None = None) -> HopperBwdPlan:
        t = tiling(spec, info)
        if t.kv_halves:
            reason = (f"the wgmma dK/dV kernel of hd{spec.head_dim} with the KV rows halved between the warpgroups "
                      f"({t.block_n} KV rows x {t.block_m} queries, {t.stages} stages, dK^T and dV^T): 1.5x the "
                      f"FLOPs per byte of L2 traffic of the head-dim split's 64 KV rows, which L2 bounds")
        elif t.split:
            reason = (f"the wgmma dK/dV kernel of hd{spec.head_dim} with head_dim split between the warpgroups "
                      f"({t.block_n} KV rows x {t.block_m} queries, {t.stages} stages): five wgmma products per "
                      f"tile pair against the mma.sync kernels' seven and their head-dim slices' recomputation "
                      f"(not the KV-row halves: {halves_refusal(spec)})")
        else:
            reason = (f"the wgmma dK/dV kernel of hd{spec.head_dim} ({t.block_n} KV rows x {t.block_m} queries, "
                      f"{t.stages} stages): measured 1.14-1.37x FlashAttention-2 on the H100, against 0.63-0.75x for "
                      f"the mma.sync kernels")
        if t.ordered_dq:
            reason += "; deterministic: dQ's reductions ordered by a semaphore per query tile"
        return HopperBwdPlan(spec=spec, arch=info.arch, family=self.name,
                             kernel_name=kernel_name(spec, info.arch, PipelineKind.multistage, "bwd"), dkdv_wgmma=t,
                             dependent_launch=info.programmatic_launch and DEPENDENT_LAUNCH,
                             tail_waves=bwd_tail_waves(spec, t),
                             cost=plan_cost(spec, info, t), reason=reason)

    def explain_lines(self, plan: HopperBwdPlan) -> list[str]:
        h = plan.dkdv_wgmma
        dq = _owner_line(h, plan.spec.head_dim)
        info = arch_info(plan.arch)
        compute, l2 = dkdv_terms(plan.spec, info, h)
        bound = "its L2 traffic" if l2 > compute else "compute"
        own_layout = h.split or h.kv_halves
        layouts = [] if own_layout else [f"shared memory, {line}" for line in layout_lines(plan.spec, info, h)]
        return [f"wgmma dK/dV {h.block_n} KV rows ({h.consumer_wgs} consumer warpgroups, setmaxnreg "
                f"{h.producer_regs}/{h.consumer_regs}) x {h.block_m} query rows per step, {h.stages} stages, "
                f"{h.smem_bytes} B, ~{h.regs_estimate} registers; {dq}",
                *([] if own_layout else [f"step: {'; '.join(step_parts(h))}"]), *layouts,
                f"model: compute {compute:.0f} us, L2 {l2:.0f} us ({step_l2_bytes(plan.spec, h) // 1024} KB per step "
                f"at {step_l2_gbps(h)} GB/s) at the reference workload: bound by {bound}", order_line(plan)]

    # ---- render and launch ---------------------------------------------------------------------
    def plan_line(self, plan: HopperBwdPlan) -> str:
        hb = plan.dkdv_wgmma
        line = (f"dkdv_wgmma {hb.block_n} KV rows x {hb.block_m} queries, {hb.stages} stages, "
                f"regs {hb.producer_regs}/{hb.consumer_regs}, ")
        if not (hb.split or hb.kv_halves):
            line += "".join(f"{part}, " for part in step_parts(hb))
        line += (_owner_line(hb, plan.spec.head_dim) if hb.split or hb.kv_halves
                 else f"dQ 64 queries x {hb.dq_cols} columns per warpgroup, " + dq_line(hb))
        if plan.tail_waves:
            line += f", the last {plan.tail_waves:g} waves' chains dealt heaviest block first"
        return line + (", dependent launches" if plan.dependent_launch else "")

    def context(self, plan: HopperBwdPlan) -> dict[str, object]:
        from ..codegen.renderer import common_context

        hb = plan.dkdv_wgmma
        hopper, pre = (params_with_variant(f, plan.spec) for f in (HOPPER_BWD_PARAMS, BWD_PARAMS))
        k = dtype_trait(plan.spec.dtype).mma_k
        if hb.kv_halves:
            ops = halves_ops(plan.spec.head_dim, k)
        elif hb.split:
            ops = split_ops(hb, k)
        else:
            t_op, acc_op, acc_ss_op, dq_op = backward_ops(hb.block_m, plan.spec.head_dim, hb.dq_cols, k)
            ops = {"t_op": t_op, "acc_op": acc_op, "acc_ss_op": acc_ss_op, "dq_op": dq_op,
                   "wgmma_ops": (t_op, acc_op, acc_ss_op, dq_op), "ds_offsets_kept": ds_offsets_kept(hb),
                   "ds_offsets_xor": ds_offsets_xor(hb)}
        return {**common_context(plan, self.plan_line(plan)), "hb": hb, **ops, "params": hopper,
                "params_layout": layout(hopper), "pre_params": pre, "pre_params_layout": layout(pre),
                "pad_rows": hb.block_m, "zero_dq_accum": hb.dq_red, "zero_dkdv_done": hb.dq_overlap,
                "lse_rows_over_scale": hb.s_from_lse, "d_rows_negated": hb.dp_from_d,
                "dependent_launch": plan.dependent_launch,
                "tail_order": plan.tail_waves > 0}

    def prepare(self, plan: HopperBwdPlan, function: LoadFunction, call: Any) -> Any:
        from .sm90_bwd_ready import prepare

        return prepare(plan, function, call)
