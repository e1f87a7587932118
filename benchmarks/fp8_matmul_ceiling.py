"""The H100's 8-bit matmul ceiling beside its 16-bit one (device machine): torch._scaled_mm of two 8192 x 8192 e4m3
matrices (per-tensor scales, bf16 out: cuBLASLt's fp8 path) against torch.matmul of bf16 ones (the bench's
measure._matmul_ms), each timed by the bench's time_ms (CUDA events, medians), ROUNDS rounds; explain's fraction of
the ceiling takes the 8-bit one for fp8 plans.

    python3 benchmarks/fp8_matmul_ceiling.py [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from attngen.bench.measure import MATMUL_N, _matmul_ms, time_ms


def fp8_ms() -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda").to(torch.float8_e4m3fn).t()   # column-major, as cuBLASLt takes
    one = torch.ones((), device="cuda")
    return time_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    flops = 2.0 * MATMUL_N**3
    rates: dict[str, list[float]] = {"fp8_e4m3": [], "bf16": []}
    for _ in range(args.rounds):
        rates["fp8_e4m3"].append(flops / fp8_ms() / 1e9)
        rates["bf16"].append(flops / _matmul_ms("bf16") / 1e9)   # the bench's own 16-bit ceiling
    for name, r in rates.items():
        print(f"{name}: {MATMUL_N}^3 matmul {min(r):.0f}-{max(r):.0f} TFLOP/s, median {statistics.median(r):.0f} "
              f"over {len(r)} rounds", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "n": MATMUL_N,
                       "tflops": rates}, f, indent=1)


if __name__ == "__main__":
    main()
