"""Executed instructions by opcode, per warp and step, of two Nsight Compute source pages side by side (the gzipped
csv that benchmarks/ncu_bwd_peer.sh writes): where one kernel issues more than the other.

    python3 benchmarks/sass_opmix.py A.sass.csv.gz B.sass.csv.gz --steps-a 2097152 --steps-b 1671168 [--top 45]

--steps-*: the warp-steps of each kernel (consumer warps x blocks x steps per block: 8 x 2048 x 128 for attngen's
hd128 dK/dV kernel at 8k; FA4's non-causal hd128 steps are 80 queries, 8 x 2048 x 102); 1 prints raw counts.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip


def opcode_counts(path: str) -> collections.Counter[str]:
    """Instructions executed (warp level) by opcode with its modifiers, predicates dropped."""
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    ix = {h: i for i, h in enumerate(rows[1])}
    counts: collections.Counter[str] = collections.Counter()
    for r in rows[2:]:
        text = r[ix["Source"]].strip()
        if text.startswith("@"):
            text = text.split(None, 1)[1]
        counts[text.split()[0]] += int(r[ix["Instructions Executed"]] or 0)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--steps-a", type=float, default=1.0)
    parser.add_argument("--steps-b", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()
    a, b = opcode_counts(args.a), opcode_counts(args.b)
    print(f"{'total':36s} {sum(a.values()) / args.steps_a:10.1f} {sum(b.values()) / args.steps_b:10.1f}")
    for op in sorted(set(a) | set(b), key=lambda o: -(a[o] / args.steps_a + b[o] / args.steps_b))[:args.top]:
        print(f"{op:36s} {a[op] / args.steps_a:10.1f} {b[op] / args.steps_b:10.1f}")


if __name__ == "__main__":
    main()
