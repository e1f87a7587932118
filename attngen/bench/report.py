"""The benchmark's outputs: bench.json (every figure), bench.md (tables), fwd_tflops.png (one subplot per
(head_dim, causal)), and a rich table in the terminal. Works on results loaded back from bench.json,
so reports can be re-rendered and runs merged without a GPU.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .model import IMPLS, seqlen_label, tiling_label

if TYPE_CHECKING:
    from rich.console import Console

JSON_NAME, MD_NAME, PLOT_NAME = "bench.json", "bench.md", "fwd_tflops.png"
NO_MATPLOTLIB = "matplotlib is not installed (pip install 'attngen[bench]')"


class PlotSkipped(Exception):
    """No plot was drawn; the message says why."""


# ---- JSON -------------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become the strings 'inf', '-inf', 'nan'."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / JSON_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(results), indent=1, default=str) + "\n")
    os.replace(tmp, path)
    return path


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


# ---- a bench.json to merge: read and checked, errors name the file ----------------------------

EXPECTED = "expected a bench.json written by attngen bench"
#: Per list in a bench.json: the fields each entry needs, with their JSON types.
ENTRY_FIELDS: dict[str, dict[str, type]] = {
    "results": {"head_dim": int, "seqlen": int, "causal": bool},
    "compile": {"head_dim": int, "causal": bool},
    "skipped": {"head_dim": int, "seqlen": int, "causal": bool, "reason": str},
}
TYPE_NAMES = {int: "an integer", bool: "true or false", str: "a string"}
OBJECT_FIELDS = ("environment", "settings", "ceilings")
ROW_OBJECTS = ("impls", "ratios")
MODEL_FIELDS = ("tiling", "io_bytes", "bound_us", "bound_by", "measured_us", "achieved_fraction",
                "predicted_us_scaled", "measured_over_predicted")
COMPILE_FIELDS = ("spec", "plan", "cold_compile_s", "load_ms")


def load_run(path: Path) -> dict[str, Any]:
    """A bench.json for `--merge`; ValueError naming the file when it is missing, not JSON or not a bench.json."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: file not found; {EXPECTED}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc}); {EXPECTED}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); {EXPECTED}"
                         ) from None
    problem = shape_problem(data)
    if problem is not None:
        raise ValueError(f"{path}: {problem}; {EXPECTED}")
    return data


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def shape_problem(data: Any) -> str | None:
    """What keeps `data` from being a bench.json that `merge` and the reports can read; None if nothing."""
    if not isinstance(data, dict):
        return f"the file holds {_json_type(data)}, not an object"
    for key in OBJECT_FIELDS:
        if key in data and not isinstance(data[key], dict):
            return f'"{key}" is {_json_type(data[key])}, not an object'
    if not isinstance(data.get("settings", {}).get("peers", []), list):
        return '"settings.peers" is not an array'
    if "results" not in data:
        return 'no "results" array'
    for key in ENTRY_FIELDS:
        problem = _list_problem(key, data.get(key, []))
        if problem is not None:
            return problem
    return None


def _list_problem(key: str, entries: Any) -> str | None:
    if not isinstance(entries, list):
        return f'"{key}" is {_json_type(entries)}, not an array'
    for i, entry in enumerate(entries):
        problem = _entry_problem(key, entry)
        if problem is not None:
            return f'"{key}"[{i}] {problem}'
    return None


def _entry_problem(key: str, entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"is {_json_type(entry)}, not an object"
    for field, kind in ENTRY_FIELDS[key].items():
        value = entry.get(field)
        if field not in entry:
            return f'has no "{field}"'
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f'"{field}" is {_json_type(value)}, not {TYPE_NAMES[kind]}'
    if key == "results":
        return _row_problem(entry)
    missing = [f for f in COMPILE_FIELDS if f not in entry]
    if key == "compile" and "error" not in entry and missing:
        return f'has neither "error" nor "{missing[0]}"'
    return None


def _row_problem(row: dict[str, Any]) -> str | None:
    for field in ROW_OBJECTS:
        if field in row and not isinstance(row[field], dict):
            return f'"{field}" is {_json_type(row[field])}, not an object'
    bad = next((name for name, e in row.get("impls", {}).items() if not isinstance(e, dict)), None)
    if bad is not None:
        return f'"impls"."{bad}" is {_json_type(row["impls"][bad])}, not an object'
    return _model_problem(row.get("model"))


def _model_problem(entry: Any) -> str | None:
    """A row's "model": absent, null or empty (no plan or no ceilings), or an object with every field the report
    shows."""
    if entry is None or entry == {}:
        return None
    if not isinstance(entry, dict):
        return f'"model" is {_json_type(entry)}, not an object or null'
    missing = [f for f in MODEL_FIELDS if f not in entry]
    return f'"model" has no "{missing[0]}"' if missing else None


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result set from several runs (e.g. one per head dim); a later run's config wins."""
    if not runs:
        raise ValueError("nothing to merge")
    merged = copy.deepcopy(runs[0])
    rows: dict[tuple[Any, ...], Any] = {}
    compiles: dict[tuple[Any, ...], Any] = {}
    for run in runs:
        rows.update({(r["head_dim"], r["causal"], r["seqlen"]): r for r in run.get("results", [])})
        compiles.update({(c["head_dim"], c["causal"]): c for c in run.get("compile", [])})
    merged["results"] = [rows[k] for k in sorted(rows)]
    merged["compile"] = [compiles[k] for k in sorted(compiles)]
    merged["skipped"] = [s for run in runs for s in run.get("skipped", [])
                         if (s["head_dim"], s["causal"], s["seqlen"]) not in rows]
    peers = [p for run in runs for p in run.get("settings", {}).get("peers", [])]
    merged.setdefault("settings", {})["peers"] = list(dict.fromkeys(peers))
    merged["merged_from"] = [{"date": r.get("environment", {}).get("date"), "gpu": r.get("environment", {}).get("gpu"),
                              "ceilings": r.get("ceilings")} for r in runs]
    return merged


# ---- markdown ---------------------------------------------------------------------------------


def _num(value: Any, fmt: str = ".0f") -> str:
    if value is None or isinstance(value, str):
        return "–"
    return format(value, fmt)


def impl_names(results: dict[str, Any]) -> list[str]:
    """attngen, then the peers that were asked for, in the standard order."""
    asked = set(results.get("settings", {}).get("peers", [])) | {"attngen"}
    seen = {name for r in results.get("results", []) for name in r.get("impls", {})}
    return [n for n in IMPLS if n in asked | seen]


def _cell(row: dict[str, Any], name: str) -> str:
    entry = row.get("impls", {}).get(name)
    if entry is None:
        return "–"
    return _num(entry.get("tflops")) if entry.get("status") == "ok" else entry.get("status", "?")


def throughput_table(results: dict[str, Any]) -> list[str]:
    names = impl_names(results)
    peers = names[1:]
    head = ["hd", "seqlen", "causal", *names, *(f"attngen/{p}" for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results.get("results", []):
        cells = [str(r["head_dim"]), str(r["seqlen"]), "yes" if r["causal"] else "no"]
        cells += [_cell(r, n) for n in names]
        cells += [_num(r.get("ratios", {}).get(p), ".2f") for p in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def model_table(results: dict[str, Any]) -> list[str]:
    head = ["hd", "seqlen", "causal", "tile", "compulsory GB", "bound µs (by)", "measured µs", "of bound",
            "model µs", "measured/model"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results.get("results", []):
        m = r.get("model")
        if not m:
            continue
        lines.append("| " + " | ".join([
            str(r["head_dim"]), str(r["seqlen"]), "yes" if r["causal"] else "no", m["tiling"],
            _num(m["io_bytes"] / 1e9, ".2f"), f"{_num(m['bound_us'])} ({m['bound_by']})", _num(m["measured_us"]),
            _num(m["achieved_fraction"], ".2f"), _num(m["predicted_us_scaled"]),
            _num(m["measured_over_predicted"], ".2f")]) + " |")
    return lines


def compile_table(results: dict[str, Any]) -> list[str]:
    lines = ["| variant | tile | cold compile s | cache load ms | registers | spills |", "|---|---|---|---|---|---|"]
    for c in results.get("compile", []):
        name = c.get("spec") or f"hd{c['head_dim']} {'causal' if c['causal'] else 'none'}"
        if "error" in c:
            lines.append(f"| {name} | failed: {_md(c['error'])[:200]} | | | | |")
            continue
        res = c.get("resources") or [{}]
        regs = max(int(x.get("registers", 0)) for x in res)
        spills = sum(int(x.get("spill_stores", 0)) + int(x.get("spill_loads", 0)) for x in res)
        lines.append(f"| {name} | {tiling_label(c['plan'])} | {c['cold_compile_s']:.2f} | {c['load_ms']:.1f} | "
                     f"{regs} | {spills} |")
    return lines


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def problems(results: dict[str, Any]) -> list[str]:
    out = []
    for r in results.get("results", []):
        where = f"hd{r['head_dim']} s{r['seqlen']} {'causal' if r['causal'] else 'full'}"
        if "error" in r:
            out.append(f"- {where}: {_md(r['error'])}")
        for name, e in r.get("impls", {}).items():
            if e.get("status") != "ok":
                out.append(f"- {where} {name} ({e.get('status')}): {_md(e.get('error', ''))[:400]}")
    out += [f"- hd{s['head_dim']} s{s['seqlen']} {'causal' if s['causal'] else 'full'}: skipped, {s['reason']}"
            for s in results.get("skipped", [])]
    return out


def markdown(results: dict[str, Any]) -> str:
    env, st, c = results.get("environment", {}), results.get("settings", {}), results.get("ceilings", {})
    lines = [f"# attngen forward benchmark: {env.get('gpu', '?')}", "",
             f"{env.get('date', '?')}; driver {env.get('driver')}, torch {env.get('torch')} (CUDA {env.get('cuda')}, "
             f"cuDNN {env.get('cudnn')}), triton {env.get('triton')}, attngen {env.get('attngen')}, "
             f"NVRTC {env.get('nvrtc')}.", "",
             f"{st.get('dtype', '?')}; batch = {st.get('tokens', 16384)} / seqlen, heads = {st.get('hidden', 2048)} / "
             "head_dim; TFLOP/s = 4·b·h·s²·d (halved for causal) / median time "
             f"({st.get('timer')}, warm-up {st.get('warmup_ms')} ms, rep {st.get('rep_ms')} ms). Every output "
             f"was checked against a float64 reference (relative error < {st.get('tolerance')}) before it was "
             f"timed. {st['l2'] + '.' if st.get('l2') else ''}", ""]
    if c:
        lines += [f"Ceilings measured in this run: {c.get('matmul_n')}³ {c.get('matmul_dtype')} matmul "
                  f"{_num(c.get('matmul_tflops'))} TFLOP/s; device-to-device copy {_num(c.get('copy_gbps'))} GB/s "
                  "(read + write).", ""]
    lines += ["## TFLOP/s, and attngen's ratio to each peer (> 1: attngen faster)", "", *throughput_table(results),
              "", "## attngen against its model", "",
              "Compulsory bytes: Q, K and V read once, O written once (K and V re-read by later query blocks come "
              "from L2, so they bound nothing). Bound: max(FLOPs / matmul rate, compulsory bytes / copy "
              "bandwidth); 'of bound' = bound / measured, at most 1. 'model µs': the plan's predicted time at its "
              "reference shape, scaled by FLOPs and by the waves' busy share (its blocks over the SMs) to this one.",
              "", *model_table(results),
              "", "## Compile cost", "", *compile_table(results), ""]
    issues = problems(results)
    if issues:
        lines += ["## Failed, unavailable or skipped", "", *issues, ""]
    return "\n".join(lines)


def write_markdown(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / MD_NAME
    path.write_text(markdown(results))
    return path


def write_partial(results: dict[str, Any], out: Path) -> None:
    """JSON and markdown so far (after every config)."""
    write_json(results, out)
    write_markdown(results, out)


def write_all(results: dict[str, Any], out: Path, log: Callable[[str], None] = print) -> list[Path]:
    """bench.json, bench.md, and the plot where matplotlib is installed (else one line to `log` says why not)."""
    paths = [write_json(results, out), write_markdown(results, out)]
    try:
        paths.append(write_plot(results, out))
    except PlotSkipped as exc:
        log(f"plot skipped: {exc}")
    return paths


# ---- plot and terminal ------------------------------------------------------------------------


def series(results: dict[str, Any], head_dim: int, causal: bool, name: str) -> tuple[list[int], list[float]]:
    """(seqlens, TFLOP/s) of one implementation's successful runs at (head_dim, causal)."""
    pts = sorted((r["seqlen"], r["impls"][name]["tflops"]) for r in results.get("results", [])
                 if r["head_dim"] == head_dim and r["causal"] == causal
                 and r.get("impls", {}).get(name, {}).get("status") == "ok")
    return [p[0] for p in pts], [p[1] for p in pts]


def write_plot(results: dict[str, Any], out: Path) -> Path:
    """One PNG, a subplot of TFLOP/s against seqlen per (head_dim, causal); PlotSkipped without matplotlib
    or without results."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotSkipped(NO_MATPLOTLIB) from None
    rows = results.get("results", [])
    dims = sorted({r["head_dim"] for r in rows})
    modes = sorted({r["causal"] for r in rows})
    if not dims:
        raise PlotSkipped("no results to plot")
    fig, axes = plt.subplots(len(dims), len(modes), figsize=(5.5 * len(modes), 3.8 * len(dims)), squeeze=False)
    for i, d in enumerate(dims):
        for j, causal in enumerate(modes):
            _subplot(axes[i][j], results, d, causal)
    axes[0][0].legend(fontsize=8)
    env = results.get("environment", {})
    fig.suptitle(f"attngen forward vs peers, {env.get('gpu', '?')}, {results.get('settings', {}).get('dtype', '')}")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / PLOT_NAME
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _subplot(ax: Any, results: dict[str, Any], head_dim: int, causal: bool) -> None:
    ticks: set[int] = set()
    top = 1.0
    for name in impl_names(results):
        xs, ys = series(results, head_dim, causal, name)
        if xs:
            ticks.update(xs)
            top = max(top, *ys)
            ax.plot(xs, ys, marker="o", label=name, color=f"C{IMPLS.index(name)}",
                    linewidth=2.5 if name == "attngen" else 1.2)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks), [seqlen_label(s) for s in sorted(ticks)])
    ax.minorticks_off()
    ax.set_ylim(0, top * 1.12)
    ax.set_title(f"head_dim {head_dim}, {'causal' if causal else 'non-causal'}")
    ax.set_xlabel("seqlen")
    ax.set_ylabel("TFLOP/s")
    ax.grid(alpha=0.3)


def print_table(results: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    names = impl_names(results)
    table = Table(title=f"attngen forward, {results.get('environment', {}).get('gpu', '?')} (TFLOP/s)",
                  title_justify="left")
    for col in ("hd", "seqlen", "causal", *names, *(f"x{p}" for p in names[1:]), "of bound", "measured/model"):
        table.add_column(col, justify="right")
    for r in results.get("results", []):
        ratios = [_ratio_cell(r.get("ratios", {}).get(p)) for p in names[1:]]
        m = r.get("model") or {}
        table.add_row(str(r["head_dim"]), str(r["seqlen"]), "yes" if r["causal"] else "no",
                      *(_cell(r, n) for n in names), *ratios, _num(m.get("achieved_fraction"), ".2f"),
                      _num(m.get("measured_over_predicted"), ".2f"))
    console.print(table)
    for c in results.get("compile", []):
        if "error" not in c:
            console.print(f"{c['spec']}: cold compile {c['cold_compile_s']:.2f} s, cache load {c['load_ms']:.1f} ms")


def _ratio_cell(value: float | None) -> str:
    if value is None:
        return "–"
    return f"[green]{value:.2f}[/]" if value >= 1.0 else f"[red]{value:.2f}[/]"
