"""Record, or compare, what the whole catalogue renders and compiles to: the proof a restructuring changed
no kernel.

    python benchmarks/catalogue_digest.py record DIR     # DIR/<spec>/<arch>.{fwd,bwd}.cu and .sass, digest.json
    python benchmarks/catalogue_digest.py compare OLD NEW

For every catalogue spec and every arch of catalogue.GENERATED_ARCHS it writes the forward and backward
CUDA source as rendered, and the SASS of each cubin as cuobjdump lists it. `compare` says, per kernel,
whether the rendered source is byte-identical, and where it is not, whether the SASS is identical
instruction for instruction (entry names and the listing's header lines aside).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attngen.catalogue import GENERATED_ARCHS, load_catalogue

#: Lines of a cuobjdump listing that name things rather than instructions.
_NAMES = re.compile(r"^\s*(Function|\.section|\.global|code for|Fatbin|arch|Module|EF_CUDA|\.headerflags)")
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\*")


def _sources(spec, arch):  # type: ignore[no-untyped-def]
    """(forward source, backward source or None) as the library renders them today."""
    import attngen

    fwd = attngen.build(spec, arch)
    from attngen.toolchain.builder import try_build_bwd

    bwd = try_build_bwd(spec, arch)
    return fwd, bwd if not isinstance(bwd, str) else None


def instructions(sass: str) -> list[str]:
    """The instruction text of a listing, in order, with symbol names (which follow kernel names) masked."""
    out = []
    for line in sass.splitlines():
        if _NAMES.match(line):
            continue
        m = _INSTRUCTION.match(line)
        if m:
            out.append(re.sub(r"\b_Z\w+|\battn_\w+", "<sym>", m.group(1)))
    return out


def record(out: Path) -> None:
    from attngen.toolchain.sass import disassemble

    jobs = [(spec, arch) for spec in load_catalogue() for arch in GENERATED_ARCHS]
    digest: dict[str, dict[str, str]] = {}

    def one(job):  # type: ignore[no-untyped-def]
        spec, arch = job
        fwd, bwd = _sources(spec, arch)
        entry = {}
        for kind, cubin in (("fwd", fwd), ("bwd", bwd)):
            if cubin is None:
                continue
            folder = out / spec.name
            folder.mkdir(parents=True, exist_ok=True)
            sass = disassemble(cubin.data)
            (folder / f"{arch.value}.{kind}.cu").write_text(cubin.source.code)
            (folder / f"{arch.value}.{kind}.sass").write_text(sass)
            entry[f"{kind}_source"] = hashlib.sha256(cubin.source.code.encode()).hexdigest()
            entry[f"{kind}_instructions"] = hashlib.sha256("\n".join(instructions(sass)).encode()).hexdigest()
        return f"{spec.name}/{arch.value}", entry

    with ThreadPoolExecutor(max_workers=2) as pool:
        for key, entry in pool.map(one, jobs):
            digest[key] = entry
            print(key, " ".join(f"{k}={v[:12]}" for k, v in entry.items()), flush=True)
    (out / "digest.json").write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")


def compare(old: Path, new: Path) -> int:
    a = json.loads((old / "digest.json").read_text())
    b = json.loads((new / "digest.json").read_text())
    same_source = same_sass = differ = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"{key}: only in {'old' if key in a else 'new'}")
            differ += 1
            continue
        for kind in ("fwd", "bwd"):
            if a[key].get(f"{kind}_source") is None and b[key].get(f"{kind}_source") is None:
                continue
            if a[key].get(f"{kind}_source") == b[key].get(f"{kind}_source"):
                same_source += 1
            elif a[key].get(f"{kind}_instructions") == b[key].get(f"{kind}_instructions"):
                same_sass += 1
                print(f"{key} {kind}: source differs, SASS identical instruction for instruction")
            else:
                differ += 1
                print(f"{key} {kind}: SASS DIFFERS")
    print(f"{same_source} kernels byte-identical in source, {same_sass} identical in SASS only, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("record").add_argument("out", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("old", type=Path)
    cmp.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        record(args.out)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
