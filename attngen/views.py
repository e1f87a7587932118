"""What `attngen explain` and `attngen families` print about the plans and the registry: rich tables and lines
built from an Explanation (planning.explain) and each family's coverage (the command line's shell is cli.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from .planning.explain import Explanation
    from .planning.ir import Candidate, KernelPlan


def print_explanation(console: Console, report: Explanation) -> None:
    """The forward plan (print_explain), the backward's and the decode's lines, and the tile shares if asked."""
    print_explain(console, report.plan, list(report.families))
    print_backward(console, report.backward)
    print_decode(console, report.decode)
    tiles = report.tiles
    if tiles is not None:
        shares = ", ".join(f"{tiles[k]:.1%} {k}" for k in ("empty", "partial", "full"))
        console.print(f"tiles at seqlen {tiles['seqlen']} ({tiles['block_m']}x{tiles['block_n']}): {shares}"
                      f"{tiles['note']}")


def print_explain(console: Console, kernel_plan: KernelPlan, families: list[tuple[str, str]]) -> None:
    """The arch's budget, the family chosen and every other forward family's verdict, the family's own
    lines, the candidate table (with the family's own column) and the chosen plan with its reason."""
    from rich.markup import escape
    from rich.table import Table

    from .planning.archs import arch_info
    from .planning.planner import forward_family
    from .planning.throughput import plan_rate, rate_line

    info = arch_info(kernel_plan.arch)
    spec = kernel_plan.spec
    family = forward_family(kernel_plan.family)
    console.print(f"[bold]{spec.name}[/] on {kernel_plan.arch.value} ({info.parts}), family {family.name}, pipeline "
                  f"{kernel_plan.pipeline.value}: {info.smem_per_block} B shared memory per block, "
                  f"{info.max_regs_per_thread} registers per thread")
    console.print(f"{kernel_plan.arch.value} offers matrix products by {escape(info.matrix_path)}, copies by "
                  f"{escape(info.copy_path)}; family {family.name} uses {escape(family.path)}", soft_wrap=True)
    for name, why in families:
        console.print(f"family {name}: {escape(why)}", soft_wrap=True)
    for line in family.explain_lines(kernel_plan):
        console.print(escape(line), soft_wrap=True)
    table = Table(show_lines=False)
    for name in ("", "block_m x block_n", "warps", "stages", family.column, "smem B", "regs est",
                 "fits / reason", "predicted us"):
        table.add_column(name, justify="left" if name in ("", "fits / reason") else "right",
                         overflow="fold")
    for cand in sorted(kernel_plan.candidates, key=_candidate_order):
        t = cand.tiling
        chosen = t == kernel_plan.tiling
        table.add_row("*" if chosen else "", f"{t.block_m} x {t.block_n}", str(t.num_warps), str(t.stages),
                      "yes" if family.column_value(t) else "no",
                      str(cand.smem_bytes), str(cand.regs_estimate),
                      "fits" if cand.fits else f"[dim]{escape(cand.reason)}[/]",
                      f"{cand.cost.predicted_us:.2f}" if cand.cost else "-",
                      style="bold green" if chosen else None)
    console.print(table)
    t = kernel_plan.tiling
    console.print(f"chosen: [bold]{kernel_plan.kernel_name}[/] block_m {t.block_m}, block_n {t.block_n}, "
                  f"{t.num_warps} warps, {t.stages} stages, {kernel_plan.smem_bytes} B shared memory, "
                  f"~{kernel_plan.regs_estimate} registers")
    console.print(rate_line(plan_rate(kernel_plan)), soft_wrap=True)
    console.print(f"reason: {escape(kernel_plan.reason)}", soft_wrap=True)


def print_backward(console: Console, backward: dict[str, object]) -> None:
    """The backward family chosen, every backward family's verdict, its kernels' lines, rate and reason."""
    from rich.markup import escape

    from .planning.throughput import rate_line

    if "unavailable" in backward:
        console.print(f"backward: [dim]{escape(str(backward['unavailable']))}[/]", soft_wrap=True)
        return
    console.print(f"backward: family {backward['family']}", soft_wrap=True)
    families, lines, rate = backward["families"], backward["kernels"], backward["predicted"]
    assert isinstance(families, dict) and isinstance(lines, list) and isinstance(rate, dict)
    for name, why in families.items():
        console.print(f"backward family {name}: {escape(str(why))}", soft_wrap=True)
    for line in lines:
        console.print(f"backward: {escape(str(line))}", soft_wrap=True)
    console.print(f"backward {escape(rate_line(rate))}", soft_wrap=True)
    console.print(f"backward reason: {escape(str(backward['reason']))}", soft_wrap=True)


def print_decode(console: Console, decode: dict[str, object]) -> None:
    """The decode family's lines (tiles, why, the split rule at example shapes), or why there is none."""
    from rich.markup import escape

    if "unavailable" in decode:
        console.print(f"decode: [dim]{escape(str(decode['unavailable']))}[/]", soft_wrap=True)
        return
    lines = decode["lines"]
    assert isinstance(lines, list)
    for line in lines:
        console.print(escape(str(line)), soft_wrap=True)


def _candidate_order(cand: Candidate) -> tuple[int, float]:
    """Fitting candidates first, fastest first; then the rejected ones in search order."""
    return (0 if cand.fits else 1, cand.cost.predicted_us if cand.cost else float("inf"))


#: The columns of `attngen families`: a family's name, direction and path, then its Coverage's fields.
FAMILY_COLUMNS = ("name", "direction", "path", "archs", "head_dims", "dtypes", "masks", "kv_layouts", "pipelines",
                  "notes")


def family_rows() -> list[dict[str, Any]]:
    """Every family in the registry, in its order, as `attngen families --json` prints it."""
    from .families import registry

    return [{"name": f.name, "direction": f.direction.value, "path": f.path, **asdict(f.coverage())}
            for f in registry()]


def families_table(rows: list[dict[str, Any]]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="kernel families, in FAMILIES' order", title_justify="left")
    for name in FAMILY_COLUMNS:
        table.add_column(name.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(escape(", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v))
                        for v in (row[c] for c in FAMILY_COLUMNS)))
    return table
