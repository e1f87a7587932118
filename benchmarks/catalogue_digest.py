"""Record, or compare, what the whole catalogue renders and compiles to: the proof a restructuring changed
no kernel.

    python benchmarks/catalogue_digest.py record DIR     # DIR/<spec>/<arch>.{fwd,bwd}.cu and .sass, digest.json
    python benchmarks/catalogue_digest.py compare OLD NEW

For every catalogue spec and every arch of catalogue.GENERATED_ARCHS it writes the forward and backward
CUDA source as rendered (the backward: the cubin of the family that plans it, sm80_bwd or sm90_bwd), and
the SASS of each cubin as cuobjdump lists it. `compare` goes kernel by kernel (entry points matched by
name; a listing is split at its "Function : <name>" headers, so a record where one cubin held every
backward kernel compares with one where they are spread differently): the rendered source byte-identical,
or else the kernel's SASS identical instruction for instruction (entry names and the listing's header
lines aside), or it differs. A kernel only the old record has is listed as no longer built (an old
sm90 backward cubin carried the mma.sync dK/dV and dQ kernels beside the wgmma one without launching
them); one only the new record has, as new.
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


def kernels(sass: str) -> dict[str, list[str]]:
    """The instructions of each kernel function of a listing, by entry name."""
    out: dict[str, list[str]] = {}
    name, lines = None, []
    for line in sass.splitlines() + ["Function : <end>"]:
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name is not None:
                out[name] = instructions("\n".join(lines))
            name, lines = m.group(1), []
        elif name is not None:
            lines.append(line)
    return out


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


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
            entry[f"{kind}_instructions"] = _digest(instructions(sass))
            for name, lines in kernels(sass).items():
                entry[f"{kind}_kernel {name}"] = _digest(lines)
        return f"{spec.name}/{arch.value}", entry

    with ThreadPoolExecutor(max_workers=2) as pool:
        for key, entry in pool.map(one, jobs):
            digest[key] = entry
            print(key, " ".join(f"{k}={v[:12]}" for k, v in entry.items() if " " not in k), flush=True)
    (out / "digest.json").write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")


def compare(old: Path, new: Path) -> int:
    a = json.loads((old / "digest.json").read_text())
    b = json.loads((new / "digest.json").read_text())
    same_source = same_sass = differ = gone = added = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"{key}: only in {'old' if key in a else 'new'}")
            differ += 1
            continue
        spec, arch = key.split("/")
        for kind in ("fwd", "bwd"):
            if a[key].get(f"{kind}_source") is None and b[key].get(f"{kind}_source") is None:
                continue
            listing = f"{spec}/{arch}.{kind}.sass"
            before, after = (kernels((d / listing).read_text()) if (d / listing).is_file() else {} for d in (old, new))
            same = a[key].get(f"{kind}_source") == b[key].get(f"{kind}_source")
            for name in sorted(set(before) | set(after)):
                if name not in after:
                    gone += 1
                    print(f"{key} {kind} {name}: no longer built")
                elif name not in before:
                    added += 1
                    print(f"{key} {kind} {name}: new")
                elif same:
                    same_source += 1
                elif before[name] == after[name]:
                    same_sass += 1
                    print(f"{key} {kind} {name}: source differs, SASS identical instruction for instruction")
                else:
                    differ += 1
                    print(f"{key} {kind} {name}: SASS DIFFERS")
    print(f"{same_source} kernels byte-identical in source, {same_sass} identical in SASS only, {differ} differ; "
          f"{gone} no longer built, {added} new")
    return 1 if differ or added else 0


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
