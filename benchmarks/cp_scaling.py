"""The ring's model (attngen.distributed.plan.ring_step) from 2 to 8 GPUs and 128k to 1M tokens: per-rank
compute against ring bytes per step, whether the transfers hide, and the predicted fwd+bwd speedup over one GPU.

    python benchmarks/cp_scaling.py > benchmarks/results/h200x2/cp_1/scaling.md
"""

from __future__ import annotations

from attngen.distributed.plan import CallShape, Rates, ring_step


def main() -> None:
    rates = Rates()
    print("# Context-parallel ring, modelled: hd128 bf16, 16 query / 16 KV heads, batch 1, causal (zigzag)\n")
    print(f"Rates: {rates.attention_flops / 1e12:.0f} TFLOP/s per GPU, {rates.link_bytes / 1e9:.0f} GB/s per link "
          f"(NVLink 4 in one host), {rates.step_latency * 1e6:.0f} us per step.\n")
    print("| GPUs | tokens | tokens per rank | fwd step compute ms | fwd step MiB | fwd step transfer ms | "
          "bwd step compute ms | bwd step MiB | bwd step transfer ms | hidden | speedup over 1 GPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for world in (2, 4, 8):
        for seqlen in (131072, 262144, 524288, 1048576):
            shape = CallShape(1, seqlen, 16, 16, 128, 2, 0.5)
            step = ring_step(world, shape, rates)
            one = ring_step(1, shape, rates)
            single = one.fwd_compute_s + one.bwd_compute_s
            print(f"| {world} | {seqlen // 1024}k | {seqlen // world // 1024}k | {step.fwd_compute_s * 1e3:.1f} | "
                  f"{step.fwd_bytes / 2**20:.0f} | {step.fwd_transfer_s * 1e3:.2f} | {step.bwd_compute_s * 1e3:.1f} | "
                  f"{step.bwd_bytes / 2**20:.0f} | {step.bwd_transfer_s * 1e3:.2f} | "
                  f"{'yes' if step.hidden else 'no'} | {single / step.call_s:.2f} |")


if __name__ == "__main__":
    main()
