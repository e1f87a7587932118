"""Where a kernel's warps wait, from an Nsight Compute source page (benchmarks/ncu_bwd.sh writes one per profile:
`ncu -i X.ncu-rep --page source --csv --print-source sass | gzip`): the stall reasons over all samples, then the
SASS instructions with the most samples and their top three reasons.

    python3 benchmarks/sass_stalls.py benchmarks/results/h100/bwd_lse_rows/ncu_lse_rows/hd128.sass.csv.gz [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip

SAMPLES = "Warp Stall Sampling (All Samples)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source", help="the gzipped csv of ncu's source page (SASS)")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    with gzip.open(args.source, "rt") as f:
        rows = list(csv.reader(f))
    header, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]

    def count(row: list[str], column: str) -> int:
        return int(row[ix[column]] or 0)

    total = sum(count(r, SAMPLES) for r in data)
    by_reason = collections.Counter({c: sum(count(r, c) for r in data) for c in reasons})
    print(f"samples {total}")
    for reason, n in by_reason.most_common(12):
        print(f"{reason:28s} {n:8d} {n / total:.1%}")
    print("--- instructions with the most samples")
    for r in sorted(data, key=lambda r: -count(r, SAMPLES))[:args.top]:
        n = count(r, SAMPLES)
        top = sorted(((count(r, c), c[6:]) for c in reasons), reverse=True)[:3]
        print(f"{r[0][-5:]} {n:7d} {n / total:5.1%} {r[1].strip()[:60]:60s} "
              + " ".join(f"{c}:{v}" for v, c in top if v))


if __name__ == "__main__":
    main()
