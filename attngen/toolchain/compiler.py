"""Stage 4: KernelSource -> Cubin, through NVRTC (cuda.bindings.nvrtc), with ptxas's resource report.

Also a command line for reproducing a failure outside attngen:

    python -m attngen.toolchain.compiler KERNEL.cu --arch sm_90a [--option=-DX=1 ...] [--out KERNEL.cubin]

prints the per-entry resource report, or the NVRTC log and exits non-zero.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import env
from ..errors import CompileError
from ..planning.archs import arch_info
from .artifacts import Cubin, KernelResources, KernelSource

#: Fixed NVRTC options. No --use_fast_math: the kernels spell their fast paths in explicit PTX.
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17", "-default-device", "-Xptxas=-v", "-lineinfo")


# ---- toolchain facts ------------------------------------------------------------------------
@lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """The NVRTC library's version, "major.minor" (for example "13.5")."""
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


@lru_cache(maxsize=1)
def cuda_include_dir() -> str | None:
    """The CUDA headers of the pip packages (nvidia-cuda-runtime), never a system CUDA install."""
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:
        return None
    locate = getattr(pathfinder, "locate_nvidia_header_directory", None)
    try:
        if locate is not None:
            found = locate("cudart")
            if found is None or found.found_via not in ("site-packages", "conda"):
                return None
            return found.abs_path
        path = pathfinder.find_nvidia_header_directory("cudart")
    except Exception:  # pathfinder raises its own errors for absent or unsupported packages
        return None
    return path if path and ("site-packages" in path or "dist-packages" in path) else None


def compile_options(target: str) -> tuple[str, ...]:
    """Every NVRTC option for `target` ("sm_80", "sm_90a", ...): part of the cache key."""
    options = [*BASE_OPTIONS, f"--gpu-architecture={target}"]
    include = cuda_include_dir()
    if include:
        options.append(f"-I{include}")
    return tuple(options)


# ---- the ptxas -v report --------------------------------------------------------------------
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_FOR = re.compile(r"Function properties for '?([^'\s]+)'?")
_SPILL_WARNING = re.compile(r"spilled to local memory in function '([^']+)', "
                            r"(\d+) bytes spill stores, (\d+) bytes spill loads")
#: ptxas's advisories that it waits for each wgmma before the next (a kernel that compiles, without spills, and runs
#: the tensor cores one product at a time): C7512, it could not keep the accumulators of wgmmas in flight together in
#: registers ("for the function"); C7515 and its kin, an ill-formed pipeline stage, such as a non-wgmma instruction
#: defining an accumulator while its product is in flight ("in the function").
_WGMMA_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized .* (?:for|in) the function '([^']+)'")
_FIELDS = {
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}
_USED = {
    "registers": re.compile(r"Used (\d+) registers"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
}


def parse_ptxas_report(log: str) -> tuple[KernelResources, ...]:
    """One KernelResources per entry function in a `ptxas -v` report, in the report's order.

    `smem_bytes` is static shared memory (dynamic shared memory is a launch parameter).
    Names are kept as ptxas prints them: extern "C" names plain, C++ names mangled.
    """
    facts: dict[str, dict[str, int]] = {}
    entries: list[str] = []
    current: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current, props_for = m.group(1), None
            if current not in entries:
                entries.append(current)
            continue
        if m := _SPILL_WARNING.search(line):
            got = facts.setdefault(m.group(1), {})
            got["spill_stores"] = max(got.get("spill_stores", 0), int(m.group(2)))
            got["spill_loads"] = max(got.get("spill_loads", 0), int(m.group(3)))
            continue
        if m := _WGMMA_SERIALIZED.search(line):
            facts.setdefault(m.group(1), {})["wgmma_serialized"] = 1
            continue
        if m := _PROPS_FOR.search(line):
            props_for = m.group(1)
            continue
        _collect(line, _FIELDS, facts, props_for or current)
        _collect(line, _USED, facts, current)
    return tuple(_resources(name, facts.get(name, {})) for name in entries)


def _collect(line: str, patterns: dict[str, re.Pattern[str]], facts: dict[str, dict[str, int]],
             name: str | None) -> None:
    if name is None:
        return
    for field, pattern in patterns.items():
        if m := pattern.search(line):
            facts.setdefault(name, {})[field] = int(m.group(1))


def _resources(name: str, got: dict[str, int]) -> KernelResources:
    return KernelResources(name=name, registers=got.get("registers", 0),
                           spill_stores=got.get("spill_stores", 0), spill_loads=got.get("spill_loads", 0),
                           smem_bytes=got.get("smem_bytes", 0), stack_bytes=got.get("stack_bytes", 0),
                           wgmma_serialized=bool(got.get("wgmma_serialized", 0)))


# ---- NVRTC ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NvrtcOutput:
    ok: bool
    cubin: bytes
    log: str


def _check(err: Any, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise CompileError(f"{what} failed: {text.decode(errors='replace') if text else err}")


def run_nvrtc(code: str, filename: str, options: Sequence[str]) -> NvrtcOutput:
    """Compile `code` to a cubin. A compilation error gives ok=False and the log; no exception."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(code.encode(), filename.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(prog)
        if result == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
            return NvrtcOutput(False, b"", log)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, text = nvrtc.nvrtcGetErrorString(result)
            return NvrtcOutput(False, b"", f"{text.decode(errors='replace')}\n{log}".strip())
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        _check(err, "nvrtcGetCUBIN")
        return NvrtcOutput(True, bytes(buf), log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(prog: Any) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    if size <= 1:
        return ""
    buf = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _check(err, "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode(errors="replace")


_retry_names = itertools.count(1)


def _with_report(out: NvrtcOutput, code: str, filename: str, options: Sequence[str]) -> NvrtcOutput:
    """NVRTC 13.0 omits the ptxas report when a program name repeats within a process.

    Recompile once under a fresh name for the report; keep the first cubin, whose line info
    names the real file (the name changes nothing else in the code).
    """
    if not out.ok or "Compiling entry function" in out.log or "-Xptxas=-v" not in options:
        return out
    stem, suffix = Path(filename).stem, Path(filename).suffix or ".cu"
    again = run_nvrtc(code, f"{stem}.report{next(_retry_names)}{suffix}", options)
    return NvrtcOutput(True, out.cubin, (out.log + "\n" + again.log).strip()) if again.ok else out


# ---- failures -------------------------------------------------------------------------------
def save_failed_source(code: str, filename: str) -> Path:
    """Keep a source NVRTC rejected: `<cache>/failed/<name>-<hash>.cu`, else a temp dir."""
    stem = Path(filename).stem
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    try:
        folder = env.cache_dir() / "failed"
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="attngen-failed-"))
    path = folder / f"{stem}-{digest}.cu"
    path.write_text(code)
    return path


def repro_command(path: Path | str, target: str, extra_options: Sequence[str] = ()) -> str:
    """A command line that recompiles a saved source exactly as attngen did."""
    args = [sys.executable, "-m", "attngen.toolchain.compiler", str(path), "--arch", target]
    args += [f"--option={o}" for o in extra_options]
    return shlex.join(args)


def compile_code(code: str, filename: str, target: str, extra_options: Sequence[str] = (), *,
                 saved_path: Path | None = None) -> tuple[NvrtcOutput, tuple[str, ...]]:
    """NVRTC over raw text; on failure, CompileError with the saved source and a repro command."""
    options = compile_options(target) + tuple(extra_options)
    out = _with_report(run_nvrtc(code, filename, options), code, filename, options)
    if not out.ok:
        path = saved_path or save_failed_source(code, filename)
        raise CompileError(f"NVRTC {nvrtc_version()} could not compile {filename} for {target}",
                           log=out.log, source_path=str(path),
                           repro=repro_command(path, target, extra_options))
    return out, options


def compile_source(source: KernelSource, *, target: str | None = None,
                   extra_options: tuple[str, ...] = ()) -> Cubin:
    """Compile a rendered kernel for its plan's arch (or `target`) and report its resources."""
    target = target or arch_info(source.plan.arch).nvrtc_target
    start = time.perf_counter()
    out, options = compile_code(source.code, source.filename, target, extra_options)
    seconds = time.perf_counter() - start
    resources = parse_ptxas_report(out.log)
    extra: dict[str, object] = {"compile_seconds": round(seconds, 4)}
    # Without any report (compile_code already retried for one) entry points stay unchecked here;
    # the driver names a missing one when it loads the cubin.
    lowered = _match_entries(source, resources, target, extra_options) if resources else {}
    if lowered:
        extra["lowered_names"] = lowered
    return Cubin(source=source, data=out.cubin, target=target, nvrtc_version=nvrtc_version(),
                 options=options, resources=resources, log=out.log, extra=extra)


def _match_entries(source: KernelSource, resources: tuple[KernelResources, ...], target: str,
                   extra_options: Sequence[str]) -> dict[str, str]:
    """Check every declared entry point was compiled; map C++-mangled ones to their symbols."""
    names = {r.name for r in resources}
    lowered: dict[str, str] = {}
    for entry in source.entry_names:
        if entry in names:
            continue
        mangled = [n for n in names if n.startswith(f"_Z{len(entry)}{entry}")]
        if len(mangled) == 1:
            lowered[entry] = mangled[0]
            continue
        path = save_failed_source(source.code, source.filename)
        found = ", ".join(sorted(names)) or "none reported"
        raise CompileError(f"entry point '{entry}' is not among the compiled kernels ({found}); "
                           f"declare it extern \"C\" __global__",
                           source_path=str(path), repro=repro_command(path, target, extra_options))
    return lowered


# ---- command line ---------------------------------------------------------------------------
def format_report(resources: Sequence[KernelResources]) -> str:
    header = f"{'entry':<48} {'regs':>5} {'spill st':>9} {'spill ld':>9} {'smem':>7} {'stack':>6}"
    rows = [f"{r.name:<48} {r.registers:>5} {r.spill_stores:>9} {r.spill_loads:>9} "
            f"{r.smem_bytes:>7} {r.stack_bytes:>6}" for r in resources]
    return "\n".join([header, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attngen.toolchain.compiler",
                                     description="Compile a CUDA source with attngen's NVRTC options.")
    parser.add_argument("source", type=Path)
    parser.add_argument("--arch", required=True, help="NVRTC target: sm_80, sm_90a, sm_100a, ...")
    parser.add_argument("--option", action="append", default=[], help="an extra NVRTC option (repeatable)")
    parser.add_argument("--out", type=Path, help="write the cubin here")
    args = parser.parse_args(argv)
    try:
        code = args.source.read_text()
        out, options = compile_code(code, args.source.name, args.arch, args.option, saved_path=args.source)
    except (OSError, CompileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.out:
        args.out.write_bytes(out.cubin)
    print(f"NVRTC {nvrtc_version()}, {' '.join(options)}")
    print(format_report(parse_ptxas_report(out.log)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
