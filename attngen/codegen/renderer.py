"""Stage 3: KernelPlan -> KernelSource. C++ structure lives in the templates; every value comes
from the plan, through one context builder, under StrictUndefined."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import jinja2

from .. import __version__
from ..features.mask import mask_trait
from ..paths import templates_dir
from ..planning.ir import BwdPlan, KernelPlan
from ..toolchain.artifacts import KernelSource
from .abi import BWD_PARAMS, HOPPER_BWD_PARAMS, layout
from .cxx import DTYPE_TAGS
from .wgmma import backward_ops

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
    from ..planning.planner import forward_family

    return forward_family(plan.family).plan_line(plan)


def common_context(plan: KernelPlan | BwdPlan, plan_line: str) -> dict[str, object]:
    """The values every template reads: the stamp, the spec, the arch and the kernel name."""
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


_common_context = common_context


def render_source(plan: KernelPlan, template: str, values: Mapping[str, object],
                  entry_names: tuple[str, ...]) -> KernelSource:
    """`template` rendered with `values`: the KernelSource of `plan` (a family's render)."""
    code = _environment().get_template(template).render(**values)
    return KernelSource(plan=plan, code=code, entry_names=entry_names, spec_hash=plan.spec.spec_hash())


def context(plan: KernelPlan) -> dict[str, object]:
    """Every value the forward template of the plan's family reads."""
    from ..planning.planner import forward_family

    return forward_family(plan.family).context(plan)


def render(plan: KernelPlan) -> KernelSource:
    """The CUDA source of `plan`, from its family's template."""
    from ..planning.planner import forward_family

    return forward_family(plan.family).render(plan)


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
