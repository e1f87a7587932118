"""Reports of the per-entry length suites: decode.json / decode.md / decode_gbps.png and varlen.json /
varlen.md / varlen_tflops.png, and the line each row prints. Work on result dicts alone (no GPU)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .report import NO_MATPLOTLIB, PlotSkipped, _clean

DECODE_FILES = ("decode.json", "decode.md", "decode_gbps.png")
VARLEN_FILES = ("varlen.json", "varlen.md", "varlen_tflops.png")
Log = Callable[[str], None]


def _f(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _status(entry: Mapping[str, Any]) -> str:
    return f"{entry['status']}: {entry.get('error', '')}"[:160]


# ---- decode -----------------------------------------------------------------------------------------------------


def decode_line(row: Mapping[str, Any]) -> str:
    parts = []
    for name, e in row["impls"].items():
        parts.append(f"{name} {e['ms']:.3f} ms {e['gbps']:.0f} GB/s ({e['fraction_of_copy']:.2f} of copy)"
                     if e["status"] == "ok" else f"{name} {e['status'].upper()}")
    r = row["ratios"]
    line = (f"decode hd{row['head_dim']} b{row['batch']} cache {_k(row['cache'])}: {'; '.join(parts)}; "
            f"best peer ({r['best_peer'] or '-'}) / attngen x{_f(r['best_peer_over_attngen'], '.2f')}, "
            f"paged / contiguous x{_f(r['paged_over_contiguous'], '.2f')}")
    g = row.get("graph_ratios")
    if not g:
        return line
    graphed = "; ".join(f"{n} {e['graph_ms'] * 1e3:.1f} us" for n, e in row["impls"].items() if e.get("graph_ms"))
    return (f"{line}\n  graphed: {graphed}; best peer ({g['best_peer'] or '-'}) / attngen "
            f"x{_f(g['best_peer_over_attngen'], '.2f')}, paged / contiguous x{_f(g['paged_over_contiguous'], '.2f')}")


def decode_markdown(results: Mapping[str, Any]) -> str:
    env, s = results["environment"], results["settings"]
    names = list(dict.fromkeys(n for r in results["rows"] for n in r["impls"]))
    out = [f"# attngen bench --decode: {env.get('gpu', '?')}", "",
           f"{env.get('date', '')}; torch {env.get('torch')}, attngen {env.get('attngen')}; {s['dtype']}, "
           f"{s['heads']} query heads over {s['kv_heads']} KV heads, seqlen_q {s['seqlen_q']}, page {s['page_size']}. "
           f"Device-to-device copy: {results['copy']['copy_gbps']:.0f} GB/s (read + write).", "",
           f"- {s.get('checks') or s['trust_seqlens']}.", f"- {s['gqa']}.", f"- {s['mask']}.",
           f"- Checked before timing: {s['check']}.", "",
           "ms, and GB/s of the cache's K+V bytes (fraction of the copy bandwidth). Ratios: best peer ms / attngen "
           "ms (> 1: attngen faster), paged / contiguous ms.", "",
           "| hd | batch | cache | " + " | ".join(names) + " | best peer | x best peer | paged / contiguous |",
           "|---" * (6 + len(names)) + "|"]
    for r in results["rows"]:
        cells = [_decode_cell(r["impls"].get(n)) for n in names]
        q = r["ratios"]
        out.append(f"| {r['head_dim']} | {r['batch']} | {_k(r['cache'])} | {' | '.join(cells)} | "
                   f"{q['best_peer'] or '-'} | {_f(q['best_peer_over_attngen'], '.2f')} | "
                   f"{_f(q['paged_over_contiguous'], '.2f')} |")
    out += _graph_table(results["rows"], names)
    out += _problems(results["rows"], lambda r: f"hd{r['head_dim']} b{r['batch']} cache {_k(r['cache'])}")
    if results.get("skipped"):
        out += ["", "Skipped (memory limit):", ""]
        out += [f"- hd{p['head_dim']} b{p['batch']} cache {_k(p['cache'])}: {p['reason']}" for p in results["skipped"]]
    return "\n".join(out) + "\n"


def _graph_table(rows: Any, names: list[str]) -> list[str]:
    """The same calls captured in CUDA graphs and replayed: the GPU's time without the host's launch cost."""
    if not any(r.get("graph_ratios") for r in rows):
        return []
    out = ["", "In CUDA graphs (each call captured once and replayed: no host cost, as a serving loop that captures "
           "its decode step sees it), us and fraction of the copy bandwidth:", "",
           "| hd | batch | cache | " + " | ".join(names) + " | best peer | x best peer | paged / contiguous |",
           "|---" * (6 + len(names)) + "|"]
    for r in rows:
        g = r.get("graph_ratios") or {}
        cells = [f"{e['graph_ms'] * 1e3:.1f} ({e['graph_fraction_of_copy']:.2f})" if (e := r["impls"].get(n, {}))
                 .get("graph_ms") else "-" for n in names]
        out.append(f"| {r['head_dim']} | {r['batch']} | {_k(r['cache'])} | {' | '.join(cells)} | "
                   f"{g.get('best_peer') or '-'} | {_f(g.get('best_peer_over_attngen'), '.2f')} | "
                   f"{_f(g.get('paged_over_contiguous'), '.2f')} |")
    return out


def _decode_cell(e: Mapping[str, Any] | None) -> str:
    if not e:
        return "-"
    if e["status"] != "ok":
        return e["status"]
    repeated = " (rep)" if e.get("reads_repeated_kv") else ""
    return f"{e['ms']:.3f} ms, {e['gbps']:.0f} GB/s ({e['fraction_of_copy']:.2f}){repeated}"


def _problems(rows: Any, label: Callable[[Any], str]) -> list[str]:
    lines = [f"- {label(r)} {n}: {_status(e)}" for r in rows for n, e in r["impls"].items() if e["status"] != "ok"]
    return ["", "Not timed:", "", *lines] if lines else []


def write_decode(results: Mapping[str, Any], out: Path, log: Log | None = print) -> list[Path]:
    """JSON and markdown; with `log`, the plot too (or one line to log saying why not)."""
    paths = _write(results, out, DECODE_FILES, decode_markdown(results))
    if log is not None:
        paths += _plot(lambda: decode_plot(results, out / DECODE_FILES[2]), log)
    return paths


def decode_plot(results: Mapping[str, Any], path: Path) -> Path:
    """GB/s against cache length, one subplot per (head dim, batch), the copy bandwidth as a dashed line."""
    plt = _pyplot()
    keys = list(dict.fromkeys((r["head_dim"], r["batch"]) for r in results["rows"]))
    if not keys:
        raise PlotSkipped("no results to plot")
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.8), squeeze=False)
    for ax, (d, b) in zip(axes[0], keys, strict=True):
        rows = [r for r in results["rows"] if (r["head_dim"], r["batch"]) == (d, b)]
        names = list(dict.fromkeys(n for r in rows for n in r["impls"]))
        for i, name in enumerate(names):
            pts = [(r["cache"], r["impls"][name]["gbps"]) for r in rows if r["impls"].get(name, {}).get("gbps")]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name, color=f"C{i}",
                        linewidth=2.5 if name.startswith("attngen") else 1.2)
        ax.axhline(results["copy"]["copy_gbps"], linestyle="--", color="gray", label="copy")
        ax.set_xscale("log", base=2)
        ax.set_title(f"hd{d} batch {b}")
        ax.set_xlabel("cache length")
        ax.set_ylabel("K+V GB/s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"attngen decode vs peers, {results['environment'].get('gpu', '?')}")
    return _save(plt, fig, path)


# ---- varlen -----------------------------------------------------------------------------------------------------


def varlen_line(row: Mapping[str, Any]) -> str:
    parts = [f"{n} {e['ms']:.2f} ms {e['tflops']:.0f} TFLOP/s" if e["status"] == "ok" else f"{n} {e['status'].upper()}"
             for n, e in row["impls"].items()]
    ratios = ", ".join(f"{k} x{_f(v, '.2f')}" for k, v in row["ratios"].items())
    return f"varlen hd{row['head_dim']} {row['docs']} docs / {row['total']} tokens: {'; '.join(parts)}; {ratios}"


def varlen_markdown(results: Mapping[str, Any]) -> str:
    env, s, lengths = results["environment"], results["settings"], results["lengths"]
    out = [f"# attngen bench --varlen: {env.get('gpu', '?')}", "",
           f"{env.get('date', '')}; torch {env.get('torch')}, attngen {env.get('attngen')}; {s['dtype']}, "
           f"{s['heads']} heads. Forward + backward over {len(lengths)} causal documents ({s['distribution']} "
           f"{s['min_len']}..{s['max_len']}, seed {s['seed']}; {min(lengths)}..{max(lengths)} drawn, {sum(lengths)} "
           f"tokens); dense: attngen causal over the same tokens as sequences of {s['dense_seqlen']}.", "",
           f"- FLOPs: {s['flops']}.", f"- Timing: {s.get('timing', 'each step timed once, one after the other')}.",
           f"- {s['trust_seqlens']}.", f"- Checked before timing: {s['check']}.", "",
           "| hd | impl | ms | TFLOP/s | status |", "|---|---|---|---|---|"]
    for r in results["rows"]:
        for name, e in r["impls"].items():
            out.append(f"| {r['head_dim']} | {name} | {_f(e.get('ms'), '.3f')} | {_f(e.get('tflops'), '.0f')} | "
                       f"{e['status'] if e['status'] == 'ok' else _status(e)} |")
    out += ["", "TFLOP/s ratios (> 1: attngen varlen faster; varlen / dense: the packed step against the dense one).",
            "", "| hd | " + " | ".join(_ratio_names(results)) + " |", "|---" * (1 + len(_ratio_names(results))) + "|"]
    for r in results["rows"]:
        out.append(f"| {r['head_dim']} | " + " | ".join(_f(r["ratios"].get(k), ".2f") for k in _ratio_names(results))
                   + " |")
    out += ["", f"Document lengths: {', '.join(map(str, lengths))}."]
    return "\n".join(out) + "\n"


def _ratio_names(results: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys(k for r in results["rows"] for k in r["ratios"]))


def write_varlen(results: Mapping[str, Any], out: Path, log: Log | None = print) -> list[Path]:
    paths = _write(results, out, VARLEN_FILES, varlen_markdown(results))
    if log is not None:
        paths += _plot(lambda: varlen_plot(results, out / VARLEN_FILES[2]), log)
    return paths


def varlen_plot(results: Mapping[str, Any], path: Path) -> Path:
    """TFLOP/s bars per implementation, one group per head dim."""
    plt = _pyplot()
    rows = results["rows"]
    if not rows:
        raise PlotSkipped("no results to plot")
    names = list(dict.fromkeys(n for r in rows for n in r["impls"]))
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(names) * len(rows), 3.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ys = [r["impls"].get(name, {}).get("tflops") or 0.0 for r in rows]
        ax.bar([j + i * width for j in range(len(rows))], ys, width, label=name, color=f"C{i}")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))], [f"hd{r['head_dim']}" for r in rows])
    ax.set_ylabel("TFLOP/s (fwd + bwd)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    ax.set_title(f"attngen packed step vs peers, {results['environment'].get('gpu', '?')}")
    return _save(plt, fig, path)


# ---- files ------------------------------------------------------------------------------------------------------


def _write(results: Mapping[str, Any], out: Path, names: tuple[str, ...], md: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / names[0], out / names[1]]
    paths[0].write_text(json.dumps(_clean(dict(results)), indent=1, default=str) + "\n")
    paths[1].write_text(md)
    return paths


def _plot(draw: Callable[[], Path], log: Log) -> list[Path]:
    try:
        return [draw()]
    except PlotSkipped as exc:
        log(f"plot skipped: {exc}")
        return []


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotSkipped(NO_MATPLOTLIB) from None
    return plt


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
