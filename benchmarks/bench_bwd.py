"""The backward benchmark; the same as `attngen bench --backward` (attngen/bench/backward.py).

    python benchmarks/bench_bwd.py --head-dims 64,128 --seqlens 2k,4k,8k,16k --out results/

Without --out it writes where results are committed, benchmarks/results/<gpu>/bwd/.
"""

import sys
from pathlib import Path

from attngen.bench.command import app
from attngen.bench.output import committed_folder, with_out

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(app(["--backward", *with_out(sys.argv[1:], lambda: committed_folder(RESULTS, "bwd"))]))
