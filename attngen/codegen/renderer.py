"""Stage 3: KernelPlan -> KernelSource. C++ structure lives in the templates; every value comes
from the plan, through one context builder, under StrictUndefined."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import jinja2

from .. import __version__, families
from ..features.dtype import dtype_trait, out_trait
from ..features.variant import variant_of
from ..features.variant_cxx import variant_context
from ..paths import templates_dir
from ..toolchain.artifacts import KernelSource, Plan
from . import abi


def _environment() -> jinja2.Environment:
    """The Jinja environment of the templates folder in use (paths.templates_dir), one per folder."""
    return _environment_at(str(templates_dir()))


@lru_cache(maxsize=4)
def _environment_at(root: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
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
    env.filters["cxx_bool"] = cxx_bool
    return env


def cxx_bool(value: object) -> str:
    """A Python truth value as C++ spells it."""
    return "true" if value else "false"


def _spec_line(plan: Plan) -> str:
    s = plan.spec
    variant = variant_of(s)
    parts = [f"mask={variant.mask.name_part}"]
    if variant.mask.source is not None and s.mask.kind.value == "expr":
        parts.append(f"mask_expr={variant.mask.source!r}")
    if variant.score_mod is not None:
        parts.append(f"score_mod={variant.score_mod.source!r}")
    if variant.sinks is not None:
        parts.append("sinks")
    if s.seqlens.value != "fixed":
        parts.append(f"seqlens={s.seqlens.value}")
    return f"head_dim={s.head_dim} dtype={s.dtype.value} {' '.join(parts)}".replace("\n", " ")


def common_context(plan: Plan, plan_line: str) -> dict[str, object]:
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
        "dtype": dtype_trait(spec.dtype),
        "out_dtype": out_trait(dtype_trait(spec.dtype)),
        "head_dim": spec.head_dim,
        "variant": variant_context(variant_of(spec)),
        "varlen": spec.seqlens.value == "varlen",
        # A varlen plan's cubin also builds its flat grid's tile table (templates/common/tile_table.cuh.j2).
        "tile_table_params": abi.TILE_TABLE_PARAMS,
        "tile_table_params_layout": abi.layout(abi.TILE_TABLE_PARAMS),
        "tile_table_max": abi.TILE_TABLE_MAX_ENTRIES,
    }


def render_source(plan: Plan, template: str, values: Mapping[str, object],
                  entry_names: tuple[str, ...]) -> KernelSource:
    """`template` rendered with `values`: the KernelSource of `plan` (a family's render: one source, one
    cubin, every entry point the family launches)."""
    code = _environment().get_template(template).render(**values)
    return KernelSource(plan=plan, code=code, entry_names=entry_names, spec_hash=plan.spec.spec_hash())


def context(plan: Plan) -> dict[str, object]:
    """Every value the template of the plan's family reads."""
    return families.get(plan.family).context(plan)


def render(plan: Plan) -> KernelSource:
    """The CUDA source of any family's plan (forward, or the backward kernels of one spec and arch in one
    source), from that family's template."""
    return families.get(plan.family).render(plan)
