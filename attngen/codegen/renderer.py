"""Stage 3: KernelPlan -> KernelSource. C++ structure lives in the templates; every value comes
from the plan, through one context builder, under StrictUndefined."""

from __future__ import annotations

from functools import lru_cache

import jinja2

from .. import __version__
from ..paths import templates_dir
from ..features.mask import mask_trait
from ..planning.ir import BwdPlan, KernelPlan
from ..toolchain.artifacts import KernelSource
from .abi import BWD_PARAMS, FWD_PARAMS, HOPPER_BWD_PARAMS, HOPPER_FWD_PARAMS, layout
from .cxx import DTYPE_TAGS
from .wgmma import attention_ops, backward_ops

FWD_TEMPLATE = "attn_fwd.cu.j2"
HOPPER_FWD_TEMPLATE = "attn_fwd_hopper.cu.j2"
HOPPER_BWD_TEMPLATE = "attn_bwd_hopper.cu.j2"
BWD_TEMPLATE = "attn_bwd.cu.j2"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        # PTX operands are written {%0, %1}: Jinja statements use <% %> instead of {% %}.
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _spec_line(plan: KernelPlan | BwdPlan) -> str:
    s = plan.spec
    window = f" window={list(s.window)}" if s.window else ""
    return f"head_dim={s.head_dim} dtype={s.dtype.value} mask={s.mask.value}{window}"


def _plan_line(plan: KernelPlan) -> str:
    t = plan.tiling
    if plan.roles is not None:
        r = plan.roles
        return (f"{plan.pipeline.value} block_m={t.block_m} block_n={t.block_n} warps={t.num_warps} "
                f"consumer_warpgroups={r.consumer_warpgroups} stages={t.stages} overlap={r.intra_wg_overlap} "
                f"regs={r.producer_regs}/{r.consumer_regs} smem={plan.smem_bytes}B")
    return (f"{plan.pipeline.value} block_m={t.block_m} block_n={t.block_n} warps={t.num_warps} "
            f"warp_m_tiles={t.warp_m_tiles} stages={t.stages} q_in_regs={t.q_in_regs} smem={plan.smem_bytes}B")


def _common_context(plan: KernelPlan | BwdPlan, plan_line: str) -> dict[str, object]:
    spec = plan.spec
    return {
        "version": __version__,
        "spec": spec,
        "spec_hash": spec.spec_hash(),
        "spec_line": _spec_line(plan),
        "plan_line": plan_line,
        "arch": plan.arch.value,
        "kernel_name": plan.kernel_name,
        "dtype": DTYPE_TAGS[spec.dtype],
        "head_dim": spec.head_dim,
        "mask": mask_trait(spec),
    }


def context(plan: KernelPlan) -> dict[str, object]:
    """Every value the forward template reads."""
    common = {**_common_context(plan, _plan_line(plan)), "tiling": plan.tiling, "smem": plan.smem}
    if plan.roles is not None:
        qk, pv = attention_ops(plan.tiling.block_n, plan.spec.head_dim)
        return {**common, "roles": plan.roles, "qk_op": qk, "pv_op": pv, "wgmma_ops": (qk, pv),
                "params": HOPPER_FWD_PARAMS, "params_layout": layout(HOPPER_FWD_PARAMS)}
    return {**common, "min_blocks_per_sm": plan.min_blocks_per_sm, "params": FWD_PARAMS,
            "params_layout": layout(FWD_PARAMS)}


def render(plan: KernelPlan) -> KernelSource:
    template = HOPPER_FWD_TEMPLATE if plan.roles is not None else FWD_TEMPLATE
    code = _environment().get_template(template).render(**context(plan))
    return KernelSource(plan=plan, code=code, entry_names=(plan.kernel_name,), spec_hash=plan.spec.spec_hash())


def _bwd_plan_line(plan: BwdPlan) -> str:
    a, b = plan.dkdv, plan.dq
    return (f"dkdv {a.block_n}x{a.block_m} warps={a.num_warps} d_chunk={a.d_chunk} smem={a.smem_bytes}B; "
            f"dq {b.block_m}x{b.block_n} warps={b.num_warps} d_chunk={b.d_chunk} smem={b.smem_bytes}B")


def bwd_context(plan: BwdPlan) -> dict[str, object]:
    """Every value the backward template reads."""
    from ..planning.planner import swizzle_chunks

    return {**_common_context(plan, _bwd_plan_line(plan)), "bwd": plan, "params": BWD_PARAMS,
            "params_layout": layout(BWD_PARAMS),
            "swizzle_chunks": swizzle_chunks(plan.spec.head_dim)}


def hopper_bwd_context(plan: BwdPlan) -> dict[str, object]:
    """Every value the Hopper dK/dV template reads."""
    hb = plan.hopper
    assert hb is not None
    t_op, acc_op, acc_ss_op, dq_op = backward_ops(hb.block_m, plan.spec.head_dim, hb.dq_cols)
    line = (f"dkdv_wgmma {hb.block_n} KV rows x {hb.block_m} queries, {hb.stages} stages, "
            f"regs {hb.producer_regs}/{hb.consumer_regs}, dQ 64 queries x {hb.dq_cols} columns per warpgroup")
    return {**_common_context(plan, line), "hb": hb, "t_op": t_op, "acc_op": acc_op, "acc_ss_op": acc_ss_op,
            "dq_op": dq_op, "wgmma_ops": (t_op, acc_op, acc_ss_op, dq_op), "params": HOPPER_BWD_PARAMS,
            "params_layout": layout(HOPPER_BWD_PARAMS)}


def render_bwd(plan: BwdPlan) -> KernelSource:
    """The backward kernels (preprocess, dK/dV, dQ, and on sm90 the wgmma dK/dV) of one spec and
    arch, in one source."""
    code = _environment().get_template(BWD_TEMPLATE).render(**bwd_context(plan))
    if plan.hopper is not None:
        code += "\n" + _environment().get_template(HOPPER_BWD_TEMPLATE).render(**hopper_bwd_context(plan))
    return KernelSource(plan=plan, code=code, entry_names=plan.entry_names,  # type: ignore[arg-type]
                        spec_hash=plan.spec.spec_hash())
