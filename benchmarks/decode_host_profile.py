"""Host cost of one KV-cache decode call, layer by layer (device machine): microseconds per call of a loop that
never waits for the GPU (b1, 4k cache: the kernels take ~20 us, so the loop runs at the host's pace), for
kernel.with_kvcache (a repeated shape: the remembered path), the op (the checked path), the launcher and a
prepared run, then a cProfile of with_kvcache's callees.

    python3 benchmarks/decode_host_profile.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats

import torch

import attngen
from attngen.bench import measure
from attngen.runtime import op
from attngen.spec.model import AttentionSpec


def per_call(fn, calls: int) -> float:
    return measure.host_us_per_call(fn, calls, warmup=20)


def prepared_run(kernel, q, k, v, used, scale):
    """A prepared call's run alone: its allocations, parameter block and launches (runtime.decode.ReadyDecode)."""
    launcher = kernel.decode_kernels()
    ready = launcher.ready(q, k, v, None)
    args = launcher.args(q, [], [])
    print("splits", ready.shape.num_splits)
    return lambda: ready.run(q, k, v, used, None, scale, args)


def gpu_us(fn, calls: int) -> float:
    """Per-call GPU time by CUDA events over a captured CUDA graph of `calls` calls (no host cost inside)."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    calls = parser.parse_args().calls
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    used = torch.full((1,), 4096, dtype=torch.int32, device="cuda")
    key = kernel.decode_key()
    launcher = kernel._decode
    scale = 128 ** -0.5
    layers = {
        "with_kvcache": lambda: kernel.with_kvcache(q, k, v, cache_seqlens=used),
        "op.decode_fwd": lambda: op.decode_fwd(q, k, v, used, None, scale, key),
        "DecodeKernels": lambda: launcher(q, k, v, used, None, scale, [], []),
        "torch.empty x2": lambda: (torch.empty_like(q), torch.empty((1, 32, 1), device="cuda")),
    }
    layers["ReadyDecode.run"] = prepared_run(kernel, q, k, v, used, scale)
    layers["flash_attn_with_kvcache (compat)"] = lambda: attngen.flash_attn_with_kvcache(q, k, v, cache_seqlens=used,
                                                                                          causal=True)
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "0"
    print(f"{'with_kvcache, lengths checked':16s} {per_call(layers['with_kvcache'], calls // 4):8.1f} us/call")
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    for name, fn in layers.items():
        print(f"{name:16s} {per_call(fn, calls):8.1f} us/call")
    for keys in (4096, 32768, 131072):
        for batch in (1, 8):
            kk = torch.randn(batch, keys, 8, 128, device="cuda", dtype=torch.bfloat16)
            qq = torch.randn(batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            uu = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
            try:
                us = gpu_us(lambda qq=qq, kk=kk, uu=uu: kernel.with_kvcache(qq, kk, kk, cache_seqlens=uu), 50)
                print(f"graph b{batch} {keys}: {us:.1f} us/call, {2 * kk.numel() * 2 / us / 1e3:.0f} GB/s")
            except Exception as exc:  # noqa: BLE001
                print(f"graph b{batch} {keys}: {type(exc).__name__}: {exc}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        layers["with_kvcache"]()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    print(text.getvalue())


if __name__ == "__main__":
    main()
