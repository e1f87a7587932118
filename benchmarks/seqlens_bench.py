"""The per-entry length suites; the same as `attngen bench --decode` and `attngen bench --varlen`
(attngen/bench/decode.py, attngen/bench/varlen.py).

    python benchmarks/seqlens_bench.py --decode --batches 1,8 --caches 4k,32k --out results/
    python benchmarks/seqlens_bench.py --varlen

Without --out it writes where results are committed, benchmarks/results/<gpu>/seqlens/.
"""

import sys
from pathlib import Path

from attngen.bench.command import app
from attngen.bench.output import committed_folder, with_out

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(app(with_out(sys.argv[1:], lambda: committed_folder(RESULTS, "seqlens"))))
