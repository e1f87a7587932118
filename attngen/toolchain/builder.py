"""Build kernels ahead of time: spec -> plan -> render -> compile (cached) -> files on disk.

The library behind `attngen build`. Nothing here needs a GPU:

    build(spec, arch)              -> Cubin
    manifest(cubin)                -> dict (what manifest.json holds)
    write_artifacts(cubin, out)    -> out/<spec name>/<arch>/ with kernel.cu, *.cubin, manifest.json
    build_many(specs, archs, out)  -> one BuildResult per (spec, arch), built in parallel
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import staged_dir, temp_name, write_atomic
from ..errors import AttngenError, OutputError, SpecError
from ..planning.ir_decode import DecodeRole
from ..spec.model import Arch, AttentionSpec
from .artifacts import Cubin

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

#: Called after each variant finishes: (result, variants done, variants in all).
Progress = Callable[["BuildResult", int, int], None]


#: Tilings the build may try when ptxas spills (the register model is an estimate; each NVRTC
#: release allocates a little differently).
MAX_SPILL_RETRIES = 4


def build(spec: AttentionSpec, arch: Arch | str) -> Cubin:
    """Plan, render and compile `spec` for `arch` (through the kernel cache). No GPU needed.

    If ptxas reports spills, the tiling is excluded with that reason and the spec is planned again;
    after MAX_SPILL_RETRIES the last cubin is returned as it is (its manifest shows the spills).
    """
    from ..codegen.renderer import render
    from ..planning.planner import plan
    from .cache import compile_cached

    arch = Arch(arch)
    excluded: dict[Any, str] = {}
    while True:
        kernel_plan = plan(spec, arch, exclude=excluded)  # a PlanError surfaces before any toolchain loads
        cubin = compile_cached(render(kernel_plan))
        spilled = sum(r.spill_stores + r.spill_loads for r in cubin.resources)
        if not spilled or len(excluded) >= MAX_SPILL_RETRIES:
            return cubin
        excluded[kernel_plan.tiling] = (f"ptxas (NVRTC {cubin.nvrtc_version}) spilled {spilled} B at "
                                        f"{max(r.registers for r in cubin.resources)} registers")


def build_bwd(spec: AttentionSpec, arch: Arch | str) -> Cubin:
    """Plan, render and compile the backward kernels of `spec` for `arch`: one cubin holding every kernel
    the plan's family launches (see attngen/families/*_bwd.py)."""
    from ..codegen.renderer import render
    from ..planning.planner_bwd import plan_bwd
    from .cache import compile_cached

    return compile_cached(render(plan_bwd(spec, Arch(arch))))


def build_decode(spec: AttentionSpec, arch: Arch | str, role: DecodeRole = DecodeRole.stream) -> Cubin:
    """Plan, render and compile the decode kernels of `spec` for `arch` (split-KV for short queries over a KV
    cache) of the tiling `role`: one cubin of the split and combine kernels (see attngen/families/sm80_decode.py)."""
    from ..codegen.renderer import render
    from ..planning.planner_decode import plan_decode
    from .cache import compile_cached

    return compile_cached(render(plan_decode(spec, Arch(arch), role)))


def try_build_bwd(spec: AttentionSpec, arch: Arch | str) -> Cubin | str:
    """The backward cubin, or why the arch's budget cannot hold the backward (a PlanError's text)."""
    from ..errors import PlanError

    try:
        return build_bwd(spec, arch)
    except PlanError as exc:
        return str(exc)


def manifest(cubin: Cubin, *, compile_seconds: float | None = None,
             bwd: Cubin | str | None = None) -> dict[str, Any]:
    """What manifest.json holds: the spec, the plan, each entry point's resources, the toolchain.

    With `bwd`, the backward entry points join `kernels` and its plan is `backward_plan` (or, when
    `bwd` is a reason, `backward` says why there is none).
    """
    from .. import __version__

    kernel_plan = cubin.source.plan
    kernels = [r.as_manifest() for r in cubin.resources]
    if isinstance(bwd, Cubin):
        kernels += [r.as_manifest() for r in bwd.resources]
    out: dict[str, Any] = {
        "attngen_version": __version__,
        "kernel_name": kernel_plan.kernel_name,
        "spec": kernel_plan.spec.model_dump(mode="json"),
        "arch": kernel_plan.arch.value,
        "plan": kernel_plan.summary(),
        "kernels": kernels,
        "nvrtc_version": cubin.nvrtc_version,
        "cache_key": cubin.cache_key,
    }
    if isinstance(bwd, Cubin):
        out["backward_plan"] = bwd.source.plan.summary()
        out["backward_cache_key"] = bwd.cache_key
    elif isinstance(bwd, str):
        out["backward"] = f"not available: {bwd}"
    seconds = compile_seconds if compile_seconds is not None else cubin.extra.get("compile_seconds")
    if isinstance(seconds, (int, float)):
        out["compile_seconds"] = round(float(seconds), 3)
    return out


def artifact_dir(out_dir: Path | str, spec: AttentionSpec, arch: Arch) -> Path:
    return Path(out_dir) / spec.name / arch.value


def write_artifacts(cubin: Cubin, out_dir: Path | str, *, compile_seconds: float | None = None,
                    bwd: Cubin | str | None = None) -> Path:
    """Write kernel.cu, <kernel_name>.cubin and manifest.json under out_dir/<spec>/<arch>/ (and, with a
    backward cubin, kernel_bwd.cu and its cubin). The folder is filled under a temporary name and renamed
    into place, so it appears whole or not at all."""
    kernel_plan = cubin.source.plan
    target = artifact_dir(out_dir, kernel_plan.spec, kernel_plan.arch)
    files = {"kernel.cu": cubin.source.code.encode(), f"{kernel_plan.kernel_name}.cubin": cubin.data}
    if isinstance(bwd, Cubin):
        files["kernel_bwd.cu"] = bwd.source.code.encode()
        files[f"{bwd.source.plan.kernel_name}.cubin"] = bwd.data
    text = json.dumps(manifest(cubin, compile_seconds=compile_seconds, bwd=bwd), indent=2, sort_keys=False) + "\n"
    files["manifest.json"] = text.encode()
    with staged_dir(target, kernel_plan.arch.value) as tmp:
        for name, data in files.items():
            write_atomic(tmp / name, data)
    return target


def prepare_out_dir(out_dir: Path | str) -> Path:
    """The output folder, created if need be; an OutputError now (before any compile) when it cannot be
    one: an empty name, a path that is a file, or a folder this process cannot write into."""
    if not str(out_dir).strip():
        raise OutputError("the output folder is an empty name; pass a folder, e.g. --out build")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise OutputError(f"output folder {path} is a file; pass a folder (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = temp_name(path, "probe")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write into output folder {path}: {exc.strerror or exc}; pass a folder "
                          f"you can write to") from None
    return path


# ---- many variants ---------------------------------------------------------------------------


@dataclass
class BuildResult:
    """The outcome of one (spec, arch) variant."""

    spec_name: str
    arch: str
    ok: bool
    seconds: float
    out_dir: Path | None = None
    error: str | None = None
    cached: bool = False
    plan: dict[str, Any] = field(default_factory=dict)
    kernels: list[dict[str, Any]] = field(default_factory=list)

    @property
    def registers(self) -> int:
        return max((int(k["registers"]) for k in self.kernels), default=0)

    @property
    def spills(self) -> int:
        return sum(int(k["spill_stores"]) + int(k["spill_loads"]) for k in self.kernels)


def resolve_archs(spec: AttentionSpec, archs: Sequence[Arch | str] | None) -> tuple[Arch, ...]:
    """The arches to build: the caller's list, else the spec's own, else a SpecError."""
    if archs:
        return tuple(Arch(a) for a in archs)
    if spec.arch:
        return tuple(spec.arch)
    allowed = ", ".join(a.value for a in Arch)
    raise SpecError(f"spec '{spec.name}' names no target arch: pass --arch (comma separated, from "
                    f"{allowed}) or add 'arch: [...]' to the spec")


def variants(specs: Iterable[AttentionSpec],
             archs: Sequence[Arch | str] | None) -> list[tuple[AttentionSpec, Arch]]:
    """The cross product of specs and their arches, in a stable order, without duplicates."""
    seen: set[tuple[str, Arch]] = set()
    out = []
    for spec in specs:
        for arch in resolve_archs(spec, archs):
            if (spec.canonical_json(), arch) not in seen:
                seen.add((spec.canonical_json(), arch))
                out.append((spec, arch))
    return out


def build_one(spec: AttentionSpec, arch: Arch, out_dir: str) -> BuildResult:
    """Build and write one variant; any failure becomes a failed BuildResult with its message."""
    start = time.perf_counter()
    try:
        cubin = build(spec, arch)
        bwd = try_build_bwd(spec, arch)
        seconds = time.perf_counter() - start
        target = write_artifacts(cubin, out_dir, bwd=bwd)
    except AttngenError as exc:
        return BuildResult(spec.name, arch.value, False, time.perf_counter() - start, error=str(exc))
    except Exception as exc:  # one broken variant must not lose the others
        message = f"{type(exc).__name__}: {exc}"
        return BuildResult(spec.name, arch.value, False, time.perf_counter() - start, error=message)
    kernels = manifest(cubin, bwd=bwd)["kernels"]
    return BuildResult(spec.name, arch.value, True, seconds, out_dir=target, cached=cubin.from_cache,
                       plan=cubin.source.plan.summary(), kernels=kernels)


def build_many(specs: Iterable[AttentionSpec], archs: Sequence[Arch | str] | None, out_dir: Path | str,
               jobs: int | None = None, progress: Progress | None = None) -> list[BuildResult]:
    """Build every (spec, arch) variant, in parallel across processes, into out_dir.

    `archs` overrides each spec's own arch list; without it a spec that names no arch raises
    SpecError before anything is built. A variant that fails is reported in its BuildResult
    (ok False, error set) and the others still build. Results come in the order of the variants.
    `jobs=1` builds in this process. An unusable `out_dir` raises OutputError before anything compiles.
    """
    todo = variants(specs, archs)
    out_dir = prepare_out_dir(out_dir)
    workers = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
    if workers == 1:
        return _build_serial(todo, str(out_dir), progress)
    return _build_parallel(todo, str(out_dir), workers, progress)


def _build_serial(todo: list[tuple[AttentionSpec, Arch]], out_dir: str,
                  progress: Progress | None) -> list[BuildResult]:
    results = []
    for spec, arch in todo:
        results.append(build_one(spec, arch, out_dir))
        if progress:
            progress(results[-1], len(results), len(todo))
    return results


def _build_parallel(todo: list[tuple[AttentionSpec, Arch]], out_dir: str, workers: int,
                    progress: Progress | None) -> list[BuildResult]:
    """Spawned worker processes, one variant each at a time. An interrupt (Ctrl-C, or `Interrupted` from
    a stop signal) stops every worker before it propagates; a worker whose parent dies exits by itself
    (interrupts.init_worker)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from ..interrupts import run_job

    results: list[BuildResult | None] = [None] * len(todo)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(run_job, build_one, spec, arch, out_dir): i for i, (spec, arch) in enumerate(todo)}
        for done, future in enumerate(as_completed(futures), start=1):
            index = futures[future]
            result = results[index] = _worker_result(future, *todo[index])
            if progress:
                progress(result, done, len(todo))
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)
    return [r for r in results if r is not None]


def _init_worker(parent_pid: int) -> None:
    """A build worker: the stop-signal plan of interrupts.init_worker, and warnings as one line."""
    import warnings

    from ..errors import show_warning_line
    from ..interrupts import init_worker

    init_worker(parent_pid)
    warnings.showwarning = show_warning_line


def _worker_result(future: Future[BuildResult], spec: AttentionSpec, arch: Arch) -> BuildResult:
    try:
        return future.result()
    except Exception as exc:  # the worker process died (a crash, out of memory)
        return BuildResult(spec.name, arch.value, False, 0.0, error=f"build worker failed: {type(exc).__name__}: {exc}")


#: Seconds a worker gets to finish the compile in flight and clean up after SIGTERM, before SIGKILL. A
#: worker handles the signal as soon as NVRTC returns, and never stores anything after it.
STOP_GRACE_SECONDS = 5.0


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started, SIGTERM the workers, SIGKILL any still alive after the grace period."""
    # Python 3.14 has pool.terminate_workers(); before it the worker processes are only in `_processes`.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(1.0)
