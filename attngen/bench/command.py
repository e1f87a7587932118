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
    head_dims: Annotated[str | None, typer.Option(
        "--head-dims", metavar="LIST", help="Head dims, comma separated (default 64,128,256; 128 with --decode "
                                            "or --varlen).")] = None,
    seqlens: Annotated[str | None, typer.Option(
        "--seqlens", metavar="LIST", help="Seqlens, comma separated (2k = 2048). Default: 512..16k, or "
                                          "--quick's per head dim.")] = None,
    causal: Annotated[str, typer.Option("--causal", help="both, yes or no.")] = "both",
    dtype: Annotated[str, typer.Option("--dtype", help="bf16 or fp16.")] = "bf16",
    peers: Annotated[str | None, typer.Option(
        "--peers", metavar="LIST", help="Peers, comma separated, from flash,cudnn,efficient,flex,fa4 (or none; default "
                                        "all); --decode: flash,cudnn,fa4; --varlen: flash,fa4.")] = None,
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
        "--backward", help="Backward and forward+backward against flash, cuDNN and fa4, and the deterministic "
                           "mode's ratio (bwd.json, bwd.md; default seqlens 2k..16k).")] = False,
    variant: Annotated[list[str] | None, typer.Option(
        "--variant", metavar="SPEC", help="Time this spec (a YAML path or a catalogue name; repeatable) against "
                                          "its plain kernel, FlexAttention and FlashAttention-4 (variant.json, "
                                          "variant.md; default seqlen 8k; --seqlens applies).")] = None,
    decode: Annotated[bool, typer.Option(
        "--decode", help="Attention over a KV cache (with_kvcache, contiguous and paged) against FlashAttention-2, "
                         "cuDNN and FlashAttention-4, in GB/s beside the copy bandwidth (decode.json, decode.md).")
    ] = False,
    varlen: Annotated[bool, typer.Option(
        "--varlen", help="A packed forward+backward step over documents of mixed lengths against attngen's dense "
                         "step, torch's varlen_attn and FlashAttention-4 (varlen.json, varlen.md).")] = False,
    batches: Annotated[str, typer.Option("--batches", metavar="LIST", help="--decode: batch sizes.")] = "1,8,32,64",
    caches: Annotated[str, typer.Option(
        "--caches", metavar="LIST", help="--decode: cache lengths (k = 1024; multiples of 256).")] = "1k,4k,32k,128k",
    seqlen_q: Annotated[int, typer.Option("--seqlen-q", help="--decode: query rows per entry (1..16).")] = 1,
    heads: Annotated[int | None, typer.Option(
        "--heads", help="--decode / --varlen: query heads (default 32 / 16).")] = None,
    kv_heads: Annotated[int, typer.Option("--kv-heads", help="--decode: KV heads (GQA).")] = 8,
    page_size: Annotated[int, typer.Option(
        "--page-size", help="--decode: keys per block of the paged cache (16..256, a multiple of 16).")] = 256,
    memory_gib: Annotated[float, typer.Option(
        "--memory-gib", help="--decode: skip points whose cache plus its copy repeated to the query heads would "
                             "pass this many GiB.")] = 40.0,
    total_tokens: Annotated[int, typer.Option(
        "--total-tokens", help="--varlen: tokens per step (a multiple of 8192).")] = 32768,
    doc_lengths: Annotated[str, typer.Option(
        "--doc-lengths", metavar="MIN..MAX", help="--varlen: document lengths, log-uniform.")] = "64..8k",
    seed: Annotated[int, typer.Option("--seed", help="--varlen: seed of the document lengths.")] = 0,
) -> None:
    """Time attngen's forward kernels against torch SDPA (flash, cuDNN, efficient) and FlexAttention.

    FlashAttention-3 paper settings: batch = 16384 / seqlen, heads = 2048 / head_dim.

    Each output is checked against a float64 reference before it is timed.

    Writes bench.json, bench.md and fwd_tflops.png into --out (default: a new folder in the current one).

    Prints TFLOP/s, attngen's ratios and, last, the folder it wrote.

    --decode (attention over a KV cache) and --varlen (a packed training step) are suites of their own:
    decode.json, decode.md, decode_gbps.png; varlen.json, varlen.md, varlen_tflops.png.

    The plot needs matplotlib: pip install 'attngen\\[bench]'.
    """
    from . import model

    if decode or varlen:
        _seqlens_suite(decode, varlen, locals())
        return
    head_dims = head_dims or "64,128,256"
    peers = peers or "flash,cudnn,efficient,flex,fa4"
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


def _seqlens_suite(decode: bool, varlen: bool, opts: dict[str, Any]) -> None:
    """--decode or --varlen: their options parsed, the suite run, the folder named."""
    from . import model, output, seqlens
    from .runner import BenchError

    if decode and varlen:
        _fail("--decode and --varlen are separate runs: pass one", EXIT_USAGE)
    try:
        decode_opts = seqlens.decode_options(opts) if decode else None
        varlen_opts = None if decode else seqlens.varlen_options(opts)
    except ValueError as exc:
        _fail(str(exc), EXIT_USAGE)
    if opts["dtype"] not in model.TOLERANCE:
        _fail(f"--dtype must be bf16 or fp16, got {opts['dtype']!r}", EXIT_USAGE)
    if decode_opts is not None and not seqlens.decode_points(decode_opts)[0]:
        _fail("no decode point fits --memory-gib", EXIT_USAGE)
    try:
        if decode_opts is not None:
            from .decode import run as run_decode

            target, paths, elapsed_s = run_decode(decode_opts, log=_log)
        else:
            from .varlen import run as run_varlen

            assert varlen_opts is not None
            target, paths, elapsed_s = run_varlen(varlen_opts, log=_log)
    except BenchError as exc:
        _fail(str(exc))
    typer.echo(output.written_line(target, paths, elapsed_s))


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
