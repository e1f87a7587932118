"""The catalogue of shipped specs (specs/*.yaml) and its rendered sources (generated/).

generated/<spec name>/<arch>.cu holds the CUDA source of every catalogue spec for the arches in
GENERATED_ARCHS, checked in so that a change of template shows up in review. Refresh it with

    python -m attngen.catalogue --write

and check it (CI does) with `python -m attngen.catalogue --check`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .spec.model import Arch, AttentionSpec

GENERATED_ARCHS: tuple[Arch, ...] = (Arch.sm80, Arch.sm90, Arch.sm100)
REFRESH_COMMAND = "python -m attngen.catalogue --write"

_PACKAGE = Path(__file__).resolve().parent


def repo_root() -> Path:
    """The source checkout this package lives in (meaningful for an editable install)."""
    return _PACKAGE.parent


def catalogue_dir() -> Path:
    """specs/ shipped inside the wheel, else the source checkout's specs/."""
    packaged = _PACKAGE / "specs"
    if packaged.is_dir():
        return packaged
    return repo_root() / "specs"


def generated_dir() -> Path:
    return repo_root() / "generated"


def catalogue_files() -> list[Path]:
    return sorted(catalogue_dir().glob("*.yaml"))


def load_catalogue_entries() -> list[tuple[Path, AttentionSpec]]:
    """(file, spec) for every catalogue spec, sorted by file name."""
    from .spec.loader import load_spec

    return [(path, load_spec(path)) for path in catalogue_files()]


def load_catalogue() -> list[AttentionSpec]:
    return [spec for _, spec in load_catalogue_entries()]


def expected_generated() -> dict[str, str]:
    """Relative path ("<spec name>/<arch>.cu") -> rendered source, for the whole catalogue."""
    from .codegen.renderer import render
    from .planning.planner import plan

    out: dict[str, str] = {}
    for spec in load_catalogue():
        for arch in GENERATED_ARCHS:
            out[f"{spec.name}/{arch.value}.cu"] = render(plan(spec, arch)).code
    return out


def _existing(directory: Path) -> set[str]:
    if not directory.is_dir():
        return set()
    return {p.relative_to(directory).as_posix() for p in directory.glob("*/*.cu")}


def check_generated(directory: Path | str | None = None) -> list[str]:
    """Problems with `directory` (default generated/): 'stale: x', 'missing: x', 'extra: x'."""
    directory = Path(directory) if directory is not None else generated_dir()
    expected = expected_generated()
    present = _existing(directory)
    problems = []
    for rel, code in sorted(expected.items()):
        if rel not in present:
            problems.append(f"missing: {directory / rel}")
        elif (directory / rel).read_text(encoding="utf-8") != code:
            problems.append(f"stale: {directory / rel}")
    problems += [f"extra: {directory / rel}" for rel in sorted(present - expected.keys())]
    return problems


def render_generated(directory: Path | str | None = None) -> list[Path]:
    """Rewrite `directory` (default generated/) to match the catalogue; returns the files written."""
    from .atomic import write_atomic

    directory = Path(directory) if directory is not None else generated_dir()
    expected = expected_generated()
    written = []
    for rel, code in sorted(expected.items()):
        path = directory / rel
        if path.is_file() and path.read_text(encoding="utf-8") == code:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, code.encode("utf-8"))
        written.append(path)
    for rel in sorted(_existing(directory) - expected.keys()):
        (directory / rel).unlink()
        written.append(directory / rel)
    for sub in directory.iterdir() if directory.is_dir() else ():
        if sub.is_dir() and not any(sub.iterdir()):
            sub.rmdir()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attngen.catalogue",
        description="Check or refresh generated/ (the catalogue's rendered sources).")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="list stale, missing or extra files; exit 1 if any")
    mode.add_argument("--write", action="store_true", help="re-render generated/ from the catalogue")
    parser.add_argument("--dir", type=Path, default=None, help="the generated folder (default: generated/)")
    args = parser.parse_args(argv)
    from .errors import AttngenError

    try:
        if args.write:
            changed = render_generated(args.dir)
            print(f"{len(changed)} file(s) updated" if changed else "generated/ is up to date")
            return 0
        problems = check_generated(args.dir)
    except AttngenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for line in problems:
        print(line)
    if problems:
        print(f"generated/ is out of date with the templates; refresh it with: {REFRESH_COMMAND}",
              file=sys.stderr)
        return 1
    print("generated/ is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
