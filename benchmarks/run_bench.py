"""Run attngen's side-by-side forward benchmark (the same as `python -m attngen.bench`).

    python benchmarks/run_bench.py --quick --out benchmarks/results/h100

Without --out it writes where results are committed, benchmarks/results/<gpu>/ (`python -m attngen.bench`
writes a new folder in the current one instead). Options: `python benchmarks/run_bench.py --help`.
BENCHMARKS.md says what it measures and writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout without an install
    from attngen.bench.command import main
    from attngen.bench.output import committed_folder, with_out

    main(with_out(sys.argv[1:], lambda: committed_folder(RESULTS)), prog_name="benchmarks/run_bench.py")
