"""Where the benchmark writes: a fresh folder under the working directory unless `--out` names one.

Pure Python apart from `committed_folder`, which asks torch for the GPU's name.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .model import gpu_slug

FORWARD_PREFIX, BACKWARD_PREFIX = "attngen-bench", "attngen-bench-bwd"
#: Arguments after which the command writes nowhere by default (or needs `--out` of its own).
NO_DEFAULT_OUT = ("--merge", "--compile-only", "--help", "-h")


def fresh_folder(path: Path) -> Path:
    """`path` if nothing exists there, else the first of `path-2`, `path-3`, ... that does not exist."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def default_folder(gpu: str, prefix: str = FORWARD_PREFIX, parent: Path = Path("."),
                   now: datetime.datetime | None = None) -> Path:
    """`parent/<prefix>-<gpu slug>-<YYYYmmdd-HHMMSS>`, made unique: the default output folder."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return fresh_folder(parent / f"{prefix}-{gpu_slug(gpu)}-{stamp}")


def written_line(out: Path, paths: Iterable[Path], elapsed_s: float | None = None) -> str:
    """The command's last line: the folder, the files written there, and the run's time."""
    names = ", ".join(p.name for p in paths)
    took = f" in {elapsed_s:.0f} s" if elapsed_s is not None else ""
    return f"results written to {out} ({names}){took}"


def names_out(args: Sequence[str]) -> bool:
    """Whether `args` name an output folder (`--out DIR`, `--out=DIR`, `-o DIR`, `-oDIR`)."""
    return any(a == "--out" or a.startswith(("--out=", "-o")) for a in args)


def with_out(args: Sequence[str], folder: Callable[[], Path | None]) -> list[str]:
    """`args` with `--out <folder()>` added, unless they name an output folder, are a `--merge`,
    `--compile-only` or `--help`, or `folder()` is None (no GPU: the command says so itself)."""
    if names_out(args) or any(a.split("=")[0] in NO_DEFAULT_OUT for a in args):
        return list(args)
    target = folder()
    return list(args) if target is None else [*args, "--out", str(target)]


def committed_folder(root: Path, sub: str = "") -> Path | None:
    """`root/<gpu slug>/<sub>` for the current GPU (where results are committed); None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_properties(torch.cuda.current_device()).name
    return root / gpu_slug(name) / sub
