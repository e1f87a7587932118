"""Run attngen's side-by-side forward benchmark (the same as `python -m attngen.bench`).

    python benchmarks/run_bench.py --quick --out benchmarks/results/h100

Options: `python benchmarks/run_bench.py --help`. BENCHMARKS.md says what it measures and writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install
    from attngen.bench.command import main

    main(prog_name="benchmarks/run_bench.py")
