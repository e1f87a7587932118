"""The `attngen` command: build, check, explain, list, families. A thin shell over attngen.build and friends.

Every error attngen raises on purpose, and every bad argument, is printed as one message on
stderr with a non-zero exit; never a traceback. Heavy modules load inside the commands, so
`attngen --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from rich.console import Console

    from .spec.model import Arch, AttentionSpec
    from .toolchain.builder import BuildResult

EXIT_FAILED = 1
EXIT_USAGE = 2


class _Commands(TyperGroup):
    """attngen's command group: every usage error is one line (`error: ...`, exit 2) like attngen's own
    errors; SIGINT, SIGTERM and SIGHUP stop a command with one line and exit 128 + the signal number;
    warnings print as one line."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        import warnings

        from .errors import show_warning_line
        from .interrupts import Interrupted, signals_interrupt

        with warnings.catch_warnings(), signals_interrupt():
            warnings.showwarning = show_warning_line
            try:
                code = super().main(*args, **{**kwargs, "standalone_mode": False})
            except Interrupted as stop:
                typer.echo(f"error: {stop}; stopped", err=True)
                code = stop.exit_code
            except Exception as exc:
                if not hasattr(exc, "exit_code") or not hasattr(exc, "format_message"):
                    raise  # not a click usage error
                code = _usage_error(exc)
        if not kwargs.get("standalone_mode", True):
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: Any) -> int:
    """Print a click UsageError / BadParameter as one line; its exit code (2)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # `attngen` alone: the help, as the user asked
        exc.show()
        return int(exc.exit_code)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    message = " ".join(exc.format_message().split()).rstrip(".")
    typer.echo(f"error: {message[:1].lower()}{message[1:]}{hint}", err=True)
    return int(exc.exit_code)


app = typer.Typer(
    cls=_Commands,
    name="attngen",
    help="Compile declarative attention specs (YAML) into exact FlashAttention-class CUDA kernels.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

ArchOption = Annotated[str | None, typer.Option(
    "--arch", "-a", metavar="LIST",
    help="Target GPU generations, comma separated (sm80,sm86,sm89,sm90,sm100,sm120). "
         "Default: the spec's own 'arch' list.")]


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"attngen {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", "-V", is_eager=True, callback=_print_version, help="Print attngen's version and exit.")] = False,
             ) -> None:
    """Compile declarative attention specs (YAML) into exact FlashAttention-class CUDA kernels."""


# ---- output and errors ------------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(stderr=stderr, width=width, highlight=False)


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """One clear message on stderr, then exit non-zero."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def _errors(code: int = EXIT_FAILED) -> Iterator[None]:
    """Turn attngen's own errors (and unreadable files) into one message and exit `code`."""
    from .errors import AttngenError

    try:
        yield
    except AttngenError as exc:
        _fail(str(exc), code)
    except OSError as exc:
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), code)


def parse_archs(text: str | None) -> list[Arch] | None:
    """'sm80,sm90' -> [Arch.sm80, Arch.sm90]; an unknown name exits with the allowed values."""
    if text is None:
        return None
    from .spec.model import Arch

    allowed = ", ".join(a.value for a in Arch)
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        _fail(f"--arch is empty; allowed values: {allowed}", EXIT_USAGE)
    out = []
    for name in names:
        try:
            arch = Arch(name.lower())
        except ValueError:
            _fail(f"unknown arch '{name}' in --arch; allowed values: {allowed}", EXIT_USAGE)
        if arch not in out:
            out.append(arch)
    return out


#: What a folder given as SPEC contributes: its YAML files, sorted by name (not its subfolders).
SPEC_SUFFIXES = (".yaml", ".yml")


def _spec_files(paths: list[Path]) -> list[Path]:
    """`paths` with each folder replaced by the YAML files in it; a folder without any is an error."""
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        found = sorted(p for p in path.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file())
        if not found:
            _fail(f"{path}: a folder without spec files (*.yaml, *.yml)")
        out += found
    return out


def _planned_on(spec: AttentionSpec) -> str:
    return f", plans on {', '.join(a.value for a in spec.arch)}" if spec.arch else ""


def _load(path: Path) -> AttentionSpec:
    """The spec in `path`; a SpecError (naming the file) when it is missing or invalid."""
    from .spec.loader import load_spec

    return load_spec(path)


# ---- build ------------------------------------------------------------------------------------


@app.command()
def build(
    specs: Annotated[list[Path], typer.Argument(
        metavar="SPEC", help="Spec files (YAML), or folders of them.")],
    arch: ArchOption = None,
    out: Annotated[str, typer.Option("--out", "-o", help="Output folder, created if missing; checked before "
                                                           "anything compiles.")] = "build",
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1,
                                             help="Parallel compile processes (default: CPU cores).")] = None,
) -> None:
    """Compile each spec for each arch; write OUT/<spec>/<arch>/ with kernel.cu, *.cubin, manifest.json."""
    from .toolchain.builder import build_many, prepare_out_dir, variants

    archs = parse_archs(arch)
    with _errors():
        loaded = [_load(p) for p in _spec_files(specs)]
        total = len(variants(loaded, archs))
    with _errors(EXIT_USAGE):
        out_dir = prepare_out_dir(out)
    results = _with_progress(total, lambda cb: build_many(loaded, archs, out_dir, jobs=jobs, progress=cb))
    _print_summary(results, out_dir)
    failed = [r for r in results if not r.ok]
    if failed:
        from rich.markup import escape

        err = _console(stderr=True)
        for r in failed:
            err.print(f"[bold red]error:[/] {escape(f'{r.spec_name} {r.arch}: {r.error}')}", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)


def _with_progress(total: int, run: Callable[[Callable[[BuildResult, int, int], None]], list[BuildResult]],
                   ) -> list[BuildResult]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]building"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=_console(stderr=True), transient=False) as bar:
        task = bar.add_task("", total=total)

        def advance(result: BuildResult, done: int, _total: int) -> None:
            mark = "ok" if result.ok else "FAILED"
            bar.update(task, completed=done, description=f"{result.spec_name} {result.arch} {mark}")

        return run(advance)


def _print_summary(results: list[BuildResult], out: Path) -> None:
    from rich.table import Table

    table = Table(title=f"attngen build -> {out}", title_justify="left")
    for name in ("spec", "arch", "block_m x block_n", "warps", "stages", "smem", "registers", "spills",
                 "time", "cached"):
        table.add_column(name, justify="left" if name in ("spec", "arch") else "right")
    for r in results:
        if not r.ok:
            table.add_row(r.spec_name, r.arch, "[red]FAILED[/]", "", "", "", "", "", f"{r.seconds:.1f}s", "")
            continue
        p = r.plan
        table.add_row(r.spec_name, r.arch, f"{p['block_m']} x {p['block_n']}", str(p["num_warps"]),
                      str(p["stages"]), f"{p['smem_bytes']} B", str(r.registers),
                      str(r.spills) if r.spills == 0 else f"[red]{r.spills}[/]",
                      f"{r.seconds:.1f}s", "yes" if r.cached else "no")
    console = _console()
    console.print(table)
    ok = sum(r.ok for r in results)
    failed = f", {len(results) - ok} failed" if ok < len(results) else ""
    console.print(f"{ok} of {len(results)} variant(s) built{failed}")


# ---- check, explain, list ---------------------------------------------------------------------


@app.command()
def check(specs: Annotated[list[Path], typer.Argument(
        metavar="SPEC", help="Spec files (YAML), or folders of them.")]) -> None:
    """Validate spec files (a folder: the YAML files in it) and plan them for the archs they list: 'OK' per
    valid file, else the error (exit 1 if any is invalid)."""
    from .errors import AttngenError
    from .planning.planner import plan

    bad = 0
    for path in _spec_files(specs):
        try:
            spec = _load(path)
        except AttngenError as exc:  # a SpecError names the file (and line) itself
            bad += 1
            typer.echo(f"error: {exc}", err=True)
            continue
        try:
            for arch in spec.arch or ():
                plan(spec, arch)
        except AttngenError as exc:
            bad += 1
            typer.echo(f"error: {path}: {exc}", err=True)
            continue
        typer.echo(f"{path}: OK ({spec.name}{_planned_on(spec)})")
    if bad:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def explain(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="A spec file (YAML).")],
    arch: Annotated[str | None, typer.Option(
        "--arch", "-a", help="Target arch (default: the spec's first).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the chosen plan, as JSON.")] = False,
    seqlen: Annotated[int | None, typer.Option(
        "--seqlen", min=1, help="Also report the share of tiles the mask skips and masks at this length.")] = None,
) -> None:
    """Show every candidate tiling with its budget arithmetic, and the plan chosen (with its reason)."""
    from .planning.explain import explain as explain_spec

    archs = parse_archs(arch)
    with _errors():
        spec = _load(spec_path)
        if archs and len(archs) > 1:
            _fail("explain takes one arch; pass a single --arch", EXIT_USAGE)
        report = explain_spec(spec, archs[0] if archs else _spec_arch(spec), seqlen=seqlen)
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        return
    from .views import print_explanation

    print_explanation(_console(), report)


def _spec_arch(spec: AttentionSpec) -> Arch:
    if spec.arch:
        return spec.arch[0]
    from .spec.model import Arch

    allowed = ", ".join(a.value for a in Arch)
    _fail(f"spec '{spec.name}' names no arch; pass --arch (one of {allowed})", EXIT_USAGE)


@app.command("list")
def list_catalogue() -> None:
    """List the shipped catalogue of specs."""
    from rich.markup import escape
    from rich.table import Table

    from .catalogue import catalogue_dir, load_catalogue_entries

    with _errors():
        entries = load_catalogue_entries()
    table = Table(title=f"catalogue: {catalogue_dir()}", title_justify="left")
    for name in ("name", "head_dim", "dtype", "mask", "file"):
        table.add_column(name, justify="right" if name == "head_dim" else "left")
    for path, spec in entries:
        mask = spec.mask.name_part if spec.mask.expr is None else spec.mask.expr
        if spec.score_mod is not None or spec.sinks.value != "none":
            mask += " + " + " + ".join(p for p in (spec.score_mod and spec.score_mod.name_part,
                                                   spec.sinks.value != "none" and "sinks") if p)
        table.add_row(spec.name, str(spec.head_dim), spec.dtype.value, escape(mask), escape(_display_path(path)))
    _console().print(table)


@app.command("families")
def list_families(
    as_json: Annotated[bool, typer.Option("--json", help="Print the registry as JSON.")] = False,
) -> None:
    """List the kernel families (attngen.families): what each serves, from its coverage."""
    from .views import families_table, family_rows

    rows = family_rows()
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    _console().print(families_table(rows))


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ---- bench ------------------------------------------------------------------------------------


@app.command(add_help_option=False, context_settings={
    "allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def bench(ctx: typer.Context) -> None:
    """Time attngen against torch SDPA and FlexAttention on this GPU (options: attngen bench --help)."""
    from .bench.command import main as bench_main

    bench_main(ctx.args, prog_name="attngen bench")


def main() -> None:
    """Console-script entry point (also `python -m attngen`)."""
    app(prog_name="attngen")
