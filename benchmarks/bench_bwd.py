"""The backward benchmark; the same as `attngen bench --backward` (attngen/bench/backward.py).

    python benchmarks/bench_bwd.py --head-dims 64,128 --seqlens 2k,4k,8k,16k --out results/
"""

import sys

from attngen.bench.command import app

if __name__ == "__main__":
    sys.exit(app(["--backward", *sys.argv[1:]]))
