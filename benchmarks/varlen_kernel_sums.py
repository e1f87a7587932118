"""Device microseconds per varlen step by kernel kind, from varlen_profile.py's outputs (two rounds each):
    python benchmarks/varlen_kernel_sums.py DIR     (reads DIR/profile_main.txt and DIR/profile_flat.txt)
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

KINDS = (("_tiles", "tiles"), ("attn_fwd", "fwd"), ("dkdv", "dkdv"), ("preprocess", "pre"),
         ("AUnary", "dq fill+convert"), ("FillFunc", "dq fill+convert"))
ROUNDS = 2


def kind(impl: str, name: str) -> str:
    if impl == "fa4":
        return "fa4 total"
    return next((k for part, k in KINDS if part in name), "torch other")


def sums(path: Path) -> dict[tuple[str, str], list[float]]:
    rows: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    label = impl = ""
    for line in path.read_text().splitlines():
        head = re.match(r"^(varlen.{20,27}?)\s+(attngen|fa4)\s+fwd", line)
        if head:
            label, impl = head.group(1).strip(), head.group(2)
            continue
        kernel = re.match(r"^\s+([0-9.]+) us\s+(.*)", line)
        if kernel and label:
            rows[(label, kind(impl, kernel.group(2)))].append(float(kernel.group(1)))
    return rows


def main() -> None:
    for tree in ("main", "flat"):
        print("==", tree)
        for (label, k), values in sorted(sums(Path(sys.argv[1]) / f"profile_{tree}.txt").items()):
            print(f"  {label:28s} {k:16s} sum/round {sum(values) / ROUNDS:8.1f}   "
                  + " ".join(f"{x:.1f}" for x in values))


if __name__ == "__main__":
    main()
