"""fp8_e4m3 forward against attngen's bf16 forward (device machine): TFLOP/s of each, the fp8 call's share spent
transposing V (runtime/fp8_layout), and FA3's accuracy report (RMSE against float64 on inputs with outliers).

    python3 benchmarks/fp8_forward.py [--head-dims 128,256] [--seqlens 2048,8192,16384] [--json out.json]

Shapes as time_bwd.py: batch x heads = 16384 / seqlen x 2048 / head_dim. The fp8 call includes everything a caller
pays (V's transpose, the descale factors' packing); `kernel` subtracts the transpose (its entry point) timed alone.
`--rounds N` times bf16, fp8 and the transpose once a round in turn, N rounds, and reports each one's median (the
per-round call ratios go to the JSON). `graph` times the same calls captured in a CUDA graph (the GPU's time
without the host's; short shapes are host-bound eagerly, the fp8 call more so: it packs the descales and launches
the transpose).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

import torch

import attngen
from attngen.bench.measure import graph_ms, time_ms
from attngen.runtime import fp8_layout
from attngen.spec.model import AttentionSpec

sys.path.insert(0, ".")
from tests.fp8_reference import fp8_reference, quantize, rmse, with_outliers  # noqa: E402
from tests.gpu_reference import reference  # noqa: E402


def quantized(shape: tuple[int, ...], g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Outlier inputs, their e4m3 quantization (per batch and head) and the descale factors."""
    x = with_outliers(shape, generator=g)
    x8, s = quantize(x)
    return x, x8, s


def graphed(fn: object) -> float:
    """graph_ms of fn, NaN (printed) where the call cannot be captured."""
    try:
        return graph_ms(fn)  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - a capture failure is reported, not fatal to the sweep
        print(f"graph capture failed: {type(e).__name__}: {e}", flush=True)
        return float("nan")


def speed(head_dim: int, seqlen: int, causal: bool, rounds: int = 1) -> dict[str, Any]:
    mask = "causal" if causal else "none"
    bf16 = attngen.compile(AttentionSpec(head_dim=head_dim, dtype="bf16", mask=mask))
    fp8 = attngen.compile(AttentionSpec(head_dim=head_dim, dtype="fp8_e4m3", mask=mask))
    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
    g = torch.Generator(device="cuda").manual_seed(seqlen + head_dim)
    shape = (batch, seqlen, heads, head_dim)
    (q, q8, qs), (k, k8, ks), (v, v8, vs) = (quantized(shape, g) for _ in range(3))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    flops = 4 * batch * heads * seqlen ** 2 * head_dim * (0.5 if causal else 1.0)
    calls = {"bf16": lambda: bf16(qb, kb, vb), "fp8": lambda: fp8(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs),
             "vt": lambda: fp8_layout.transpose_for(fp8, v8)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):  # each call once a round, in turn: the machine's drift falls on all three alike
        for name, call in calls.items():
            times[name].append(time_ms(call))
    ms_bf16, ms_fp8, ms_vt = (statistics.median(times[n]) for n in ("bf16", "fp8", "vt"))
    g_bf16 = graphed(lambda: bf16(qb, kb, vb))
    g_fp8 = graphed(lambda: fp8(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs))
    return {"head_dim": head_dim, "seqlen": seqlen, "causal": causal, "bf16_tflops": flops / ms_bf16 / 1e9,
            "bf16_graph_tflops": flops / g_bf16 / 1e9, "fp8_graph_tflops": flops / g_fp8 / 1e9,
            "fp8_tflops": flops / ms_fp8 / 1e9, "fp8_kernel_tflops": flops / (ms_fp8 - ms_vt) / 1e9,
            "v_transpose_us": ms_vt * 1e3, "fp8_ms": ms_fp8, "bf16_ms": ms_bf16, "rounds_ms": times,
            "call_ratio_rounds": [b / f for b, f in zip(times["bf16"], times["fp8"], strict=True)]}


def accuracy(head_dim: int, seqlen: int) -> dict[str, float]:
    """FA3's accuracy report: RMSE against float64 of the unquantized inputs (standard normal, 0.1% of entries x10),
    for the fp8 kernel (per-(batch, head) descale factors) and the bf16 one."""
    g = torch.Generator(device="cuda").manual_seed(head_dim)
    shape = (1, seqlen, 4, head_dim)
    (q, q8, qs), (k, k8, ks), (v, v8, vs) = (quantized(shape, g) for _ in range(3))
    ref, _ = reference(q, k, v, -1, -1)
    fp8 = attngen.compile(AttentionSpec(head_dim=head_dim, dtype="fp8_e4m3"))
    bf16 = attngen.compile(AttentionSpec(head_dim=head_dim, dtype="bf16"))
    out8 = fp8(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs)
    out16 = bf16(*(x.to(torch.bfloat16) for x in (q, k, v)))
    deq, _ = fp8_reference(q8, k8, v8, qs, ks, vs, -1, -1)
    return {"head_dim": head_dim, "seqlen": seqlen, "rmse_fp8": rmse(out8, ref), "rmse_bf16": rmse(out16, ref),
            "rmse_fp8_vs_dequantized": rmse(out8, deq), "ref_rms": float(ref.pow(2).mean().sqrt())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dims", default="128,256")
    parser.add_argument("--seqlens", default="2048,8192,16384")
    parser.add_argument("--json", default="")
    parser.add_argument("--rounds", type=int, default=1, help="time bf16, fp8 and V's transpose in turn, N rounds")
    args = parser.parse_args()
    rows, acc = [], []
    for d in map(int, args.head_dims.split(",")):
        a = accuracy(d, 4096)
        acc.append(a)
        print(f"accuracy hd{d} s4096: RMSE fp8 {a['rmse_fp8']:.2e} (vs its dequantized inputs "
              f"{a['rmse_fp8_vs_dequantized']:.2e}), bf16 {a['rmse_bf16']:.2e}; output RMS {a['ref_rms']:.2e}",
              flush=True)
        for s in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                r = speed(d, s, causal, args.rounds)
                rows.append(r)
                print(f"hd{d} s{s} {'causal' if causal else 'none'}: bf16 {r['bf16_tflops']:.0f}, fp8 call "
                      f"{r['fp8_tflops']:.0f} ({r['fp8_tflops'] / r['bf16_tflops']:.2f}x), fp8 kernel "
                      f"{r['fp8_kernel_tflops']:.0f} ({r['fp8_kernel_tflops'] / r['bf16_tflops']:.2f}x) TFLOP/s; "
                      f"V transpose {r['v_transpose_us']:.0f} us; graphs: bf16 {r['bf16_graph_tflops']:.0f}, fp8 "
                      f"{r['fp8_graph_tflops']:.0f} ({r['fp8_graph_tflops'] / r['bf16_graph_tflops']:.2f}x)",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "speed": rows,
                       "accuracy": acc}, f, indent=1)


if __name__ == "__main__":
    main()
