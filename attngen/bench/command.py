"""The benchmark's command line: `python -m attngen.bench ...` and `attngen bench ...` (one definition).

Imports only typer at load; torch and the benchmark load when the command runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

EXIT_FAILED, EXIT_USAGE = 1, 2

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _parse(what: str, parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        _fail(f"{what}: {exc}", EXIT_USAGE)


@app.command()
def bench(
    quick: Annotated[bool, typer.Option(
        "--quick", help="A subset (hd 64 and 256 at 2k/8k, hd 128 at 2k/8k/16k, causal both) for one short run.")
    ] = False,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Output folder, created if missing (default: a new folder in the current one, "
                            "attngen-bench-<gpu>-<YYYYmmdd-HHMMSS>/; attngen-bench-bwd-... with --backward).")
    ] = None,
    head_dims: Annotated[str, typer.Option("--head-dims", metavar="LIST", help="Head dims, comma separated.")
                         ] = "64,128,256",
    seqlens: Annotated[str | None, typer.Option(
        "--seqlens", metavar="LIST", help="Seqlens, comma separated (2k = 2048). Default: 512..16k, or "
                                          "--quick's per head dim.")] = None,
    causal: Annotated[str, typer.Option("--causal", help="both, yes or no.")] = "both",
    dtype: Annotated[str, typer.Option("--dtype", help="bf16 or fp16.")] = "bf16",
    peers: Annotated[str, typer.Option(
        "--peers", metavar="LIST", help="Peers, comma separated, from flash,cudnn,efficient,flex (or none).")
    ] = "flash,cudnn,efficient,flex",
    budget_s: Annotated[float | None, typer.Option(
        "--budget-s", help="Skip the configs left once this many seconds have passed (reports still written).")
    ] = None,
    compile_only: Annotated[str | None, typer.Option(
        "--compile-only", metavar="ARCH", help="No GPU: only the cold compile and cache-load times of each "
                                               "variant, built for ARCH (e.g. sm90).")] = None,
    merge: Annotated[list[Path] | None, typer.Option(
        "--merge", metavar="JSON", help="No GPU: merge these bench.json files (repeatable) and write the "
                                        "reports to --out.")] = None,
    backward: Annotated[bool, typer.Option(
        "--backward", help="Backward and forward+backward against flash and cuDNN, and the deterministic "
                           "mode's ratio (bwd.json, bwd.md; default seqlens 2k..16k).")] = False,
    variant: Annotated[list[str] | None, typer.Option(
        "--variant", metavar="SPEC", help="Time this spec (a YAML path or a catalogue name; repeatable) against "
                                          "its plain kernel, FlexAttention and FlashAttention-4 (variant.json, "
                                          "variant.md; default seqlen 8k; --seqlens applies).")] = None,
) -> None:
    """Time attngen's forward kernels against torch SDPA (flash, cuDNN, efficient) and FlexAttention.

    FlashAttention-3 paper settings: batch = 16384 / seqlen, heads = 2048 / head_dim.

    Each output is checked against a float64 reference before it is timed.

    Writes bench.json, bench.md and fwd_tflops.png into --out (default: a new folder in the current one).

    Prints TFLOP/s, attngen's ratios and, last, the folder it wrote.

    The plot needs matplotlib: pip install 'attngen\\[bench]'.
    """
    from . import model

    if merge:
        _merge(merge, out)
        return
    if compile_only:
        _compile_only(compile_only, _parse("--head-dims", model.parse_ints, head_dims),
                      model.parse_causal(causal), dtype, out)
        return
    if variant:
        _variant(variant, _parse("--seqlens", lambda t: model.parse_ints(t, model.parse_seqlen), seqlens or "8k"),
                 out)
        return
    if dtype not in model.TOLERANCE:
        _fail(f"--dtype must be bf16 or fp16, got {dtype!r}", EXIT_USAGE)
    if backward:
        _backward(_parse("--head-dims", model.parse_ints, head_dims),
                  _parse("--seqlens", lambda t: model.parse_ints(t, model.parse_seqlen), seqlens or "2k,4k,8k,16k"),
                  _parse("--causal", model.parse_causal, causal), dtype, out)
        return
    from .runner import BenchOptions

    options = BenchOptions(
        head_dims=_parse("--head-dims", model.parse_ints, head_dims),
        seqlens=_parse("--seqlens", lambda t: model.parse_ints(t, model.parse_seqlen), seqlens) if seqlens else None,
        causal=_parse("--causal", model.parse_causal, causal), dtype=dtype,
        peers=_parse("--peers", model.parse_peers, peers), quick=quick, out=out, budget_s=budget_s)
    if not options.grid():
        _fail("no configuration to run: --quick covers head dims 64, 128 and 256 only; pass --seqlens", EXIT_USAGE)
    _run(options)


def _backward(head_dims: Sequence[int], seqlens: Sequence[int], causal: Sequence[bool], dtype: str,
              out: Path | None) -> None:
    from . import backward, measure, output

    env = measure.environment()
    env["line"] = (f"{env['date']}; driver {env.get('driver', '?')}, torch {env['torch']} (cuDNN {env['cudnn']}), "
                   f"triton {env['triton']}, attngen {env['attngen']}, NVRTC {env['nvrtc']}; {dtype}.")
    target = out or output.default_folder(env["gpu"], output.BACKWARD_PREFIX)
    rows = backward.run(head_dims, seqlens, causal, dtype, log=_log)
    paths = backward.write(rows, target, env)
    typer.echo(output.written_line(target, paths))


def _variant(names: list[str], seqlens: Sequence[int], out: Path | None) -> None:
    from . import output, variant
    from .runner import BenchError

    try:
        specs = [variant.load(name) for name in names]
    except ValueError as exc:
        _fail(str(exc), EXIT_USAGE)
    try:
        target, paths, elapsed_s = variant.run(specs, seqlens, out, log=_log)
    except BenchError as exc:
        _fail(str(exc))
    typer.echo(output.written_line(target, paths, elapsed_s))


def _run(options: Any) -> None:
    from .runner import BenchError, run

    try:
        results, out = run(options, log=_log)
    except BenchError as exc:
        _fail(str(exc))
    _report(results, out, results["elapsed_s"])


def _merge(files: list[Path], out: Path | None) -> None:
    from . import report

    if out is None:
        _fail("--merge needs --out (where to write the merged reports)", EXIT_USAGE)
    try:
        runs = [report.load_run(f) for f in files]
    except ValueError as exc:
        _fail(f"--merge {exc}")
    _report(report.merge(runs), out)


def _report(results: dict[str, Any], out: Path, elapsed_s: float | None = None) -> None:
    """The reports written, the table printed, then why there is no plot (if so) and where it all went."""
    from . import output, report

    notes: list[str] = []
    paths = report.write_all(results, out, log=notes.append)
    report.print_table(results, _console())
    for note in notes:
        typer.echo(note)
    typer.echo(output.written_line(out, paths, elapsed_s))


def _compile_only(arch: str, head_dims: Sequence[int], causal: Sequence[bool], dtype: str, out: Path | None) -> None:
    """Cold compile (plan, render, NVRTC into an empty cache) and cache load of each variant, no GPU."""
    import json
    import platform

    from attngen.errors import AttngenError

    from .peers import compile_attngen

    rows = []
    for head_dim in head_dims:
        for c in causal:
            try:
                _, info = compile_attngen(head_dim, c, dtype, arch)
            except (AttngenError, ValueError) as exc:
                _fail(str(exc), EXIT_USAGE)
            rows.append(info)
            _log(f"{info['spec']} {info['arch']}: cold compile {info['cold_compile_s']:.2f} s, "
                 f"cache load {info['load_ms']:.1f} ms (NVRTC {info['nvrtc']})")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
        (out / "compile.json").write_text(json.dumps({"host": meta, "variants": rows}, indent=1))
        typer.echo(f"wrote {out / 'compile.json'}")


def _log(line: str) -> None:
    print(line, flush=True)


def _console() -> Any:
    from rich.console import Console

    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(width=width, highlight=False)


def main(args: Sequence[str] | None = None, prog_name: str = "python -m attngen.bench") -> None:
    """Run the command with `args` (default: sys.argv[1:])."""
    typer.main.get_command(app)(list(args) if args is not None else sys.argv[1:], prog_name=prog_name)
