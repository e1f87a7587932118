"""Content-addressed cache of compiled kernels, under `env.cache_dir()` (ATTNGEN_CACHE_DIR moves it).

Layout: `<cache>/<key[:2]>/<key>/` holds `<kernel_name>.cu`, `<kernel_name>.cubin` and `meta.json`
(the readable name beside the hash). An entry is built in a temp dir of the same parent and renamed
into place in one `os.replace` (`atomic.staged_dir`), so it appears whole or not at all.
Builders of one key serialize on `<cache>/locks/<key>.lock` and re-check after acquiring it.
An entry that fails any check (missing file, bad JSON, cubin sha256 mismatch) is deleted and rebuilt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from filelock import FileLock

from .. import __version__, env
from ..atomic import staged_dir
from ..paths import PACKAGE_DIR, templates_dir
from ..planning.archs import arch_info
from . import compiler
from .artifacts import Cubin, KernelResources, KernelSource

#: Bump when the entry layout or meta.json changes; old entries then miss.
FORMAT = 1
META = "meta.json"


# ---- the key ------------------------------------------------------------------------------
def _hashed_files(root: Path, label: str) -> list[tuple[str, Path]]:
    if not root.is_dir():
        return []
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_file() and path.suffix not in (".pyc", ".pyo"):
            found.append((f"{label}/{rel.as_posix()}", path))
    return found


def generator_hash() -> str:
    """sha256 over every file of the attngen package and of the templates folder in use."""
    return _generator_hash_of(templates_dir())


@lru_cache(maxsize=4)
def _generator_hash_of(templates: Path) -> str:
    files = _hashed_files(PACKAGE_DIR, "attngen") + _hashed_files(templates, "templates")
    digest = hashlib.sha256()
    for name, path in sorted(files):
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def default_target(source: KernelSource) -> str:
    return arch_info(source.plan.arch).nvrtc_target


def cache_key(source: KernelSource, target: str | None = None,
              options: tuple[str, ...] | None = None) -> str:
    """sha256 of everything that changes the compiled output."""
    target = target or default_target(source)
    if options is None:
        options = compiler.compile_options(target)
    fields = {
        "format": FORMAT,
        "attngen": __version__,
        "generator": generator_hash(),
        "spec": source.plan.spec.canonical_json(),
        "arch": source.plan.arch.value,
        "target": target,
        "source": hashlib.sha256(source.code.encode()).hexdigest(),
        "entries": list(source.entry_names),
        "nvrtc": compiler.nvrtc_version(),
        "options": list(options),
        "environment": env.key_environment(),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


# ---- entries ------------------------------------------------------------------------------
def entry_dir(key: str) -> Path:
    return env.cache_dir() / key[:2] / key


def lock_path(key: str) -> Path:
    return env.cache_dir() / "locks" / f"{key}.lock"


def _meta(cubin: Cubin, key: str) -> dict[str, Any]:
    source = cubin.source
    return {
        "format": FORMAT,
        "key": key,
        "kernel_name": source.plan.kernel_name,
        "spec_hash": source.spec_hash,
        "arch": source.plan.arch.value,
        "target": cubin.target,
        "entry_names": list(source.entry_names),
        "nvrtc_version": cubin.nvrtc_version,
        "options": list(cubin.options),
        "cubin_sha256": hashlib.sha256(cubin.data).hexdigest(),
        "cubin_bytes": len(cubin.data),
        "resources": [r.as_manifest() for r in cubin.resources],
        "log": cubin.log,
        "extra": cubin.extra,
        "attngen_version": __version__,
        "created": time.time(),
    }


def _store(entry: Path, cubin: Cubin, key: str) -> None:
    """Write the entry into a temp dir beside it, then rename it into place (caller holds the lock)."""
    name = cubin.source.plan.kernel_name
    with staged_dir(entry, key[:16]) as tmp:
        (tmp / f"{name}.cu").write_text(cubin.source.code)
        (tmp / f"{name}.cubin").write_bytes(cubin.data)
        (tmp / META).write_text(json.dumps(_meta(cubin, key), indent=1, default=str))


def _load(entry: Path, source: KernelSource, key: str) -> Cubin | None:
    """The entry as a Cubin, or None when it is absent or fails any check."""
    start = time.perf_counter()
    try:
        meta = json.loads((entry / META).read_text())
        name = source.plan.kernel_name
        if meta["format"] != FORMAT or meta["key"] != key or meta["kernel_name"] != name:
            return None
        data = (entry / f"{name}.cubin").read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["cubin_sha256"] or not (entry / f"{name}.cu").is_file():
            return None
        resources = tuple(KernelResources(**r) for r in meta["resources"])
        extra = dict(meta.get("extra") or {})
        extra.update(cache_path=str(entry), load_seconds=round(time.perf_counter() - start, 6))
        return Cubin(source=source, data=data, target=meta["target"], nvrtc_version=meta["nvrtc_version"],
                     options=tuple(meta["options"]), resources=resources, log=meta.get("log", ""),
                     cache_key=key, from_cache=True, extra=extra)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def lookup(source: KernelSource, *, target: str | None = None) -> Cubin | None:
    """The cached Cubin for `source`, or None; never compiles."""
    target = target or default_target(source)
    key = cache_key(source, target)
    return _load(entry_dir(key), source, key)


def compile_cached(source: KernelSource, *, target: str | None = None) -> Cubin:
    """The Cubin for `source`: from the cache when a sound entry exists, else compiled and stored."""
    target = target or default_target(source)
    key = cache_key(source, target)
    entry = entry_dir(key)
    hit = _load(entry, source, key)
    if hit is not None:
        return hit
    try:
        lock_path(key).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        warnings.warn(f"attngen cache {env.cache_dir()} is not writable ({exc}); compiling uncached",
                      stacklevel=2)
        return dataclasses.replace(compiler.compile_source(source, target=target), cache_key=key)
    with FileLock(str(lock_path(key))):
        hit = _load(entry, source, key)  # another process may have built it while we waited
        if hit is not None:
            return hit
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)  # corrupt or stale: never loaded
        cubin = dataclasses.replace(compiler.compile_source(source, target=target), cache_key=key)
        try:
            _store(entry, cubin, key)
        except OSError as exc:
            warnings.warn(f"could not store kernel in attngen cache at {entry}: {exc}", stacklevel=2)
        else:
            cubin.extra["cache_path"] = str(entry)
    return cubin


# ---- maintenance --------------------------------------------------------------------------
def _entries(root: Path) -> list[Path]:
    return [p for shard in root.glob("[0-9a-f][0-9a-f]") if shard.is_dir()
            for p in shard.iterdir() if p.is_dir() and not p.name.startswith(".")]


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cache_info() -> dict[str, object]:
    """Where the cache is, how many entries and bytes it holds, and how many failed sources."""
    root = env.cache_dir()
    entries = _entries(root) if root.is_dir() else []
    failed = root / "failed"
    return {
        "path": str(root),
        "entries": len(entries),
        "bytes": sum(_size(e) for e in entries),
        "failed_sources": len(list(failed.glob("*.cu"))) if failed.is_dir() else 0,
    }


def clear_cache() -> int:
    """Delete every entry, lock and saved failure; returns the number of entries removed."""
    root = env.cache_dir()
    if not root.is_dir():
        return 0
    removed = len(_entries(root))
    for shard in root.glob("[0-9a-f][0-9a-f]"):
        shutil.rmtree(shard, ignore_errors=True)
    for sub in ("locks", "failed"):
        shutil.rmtree(root / sub, ignore_errors=True)
    return removed
