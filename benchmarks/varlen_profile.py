"""Where the varlen training step's time goes (device machine): forward and backward timed apart, and every
kernel's device time, for attngen's varlen call, attngen's dense call and FlashAttention-4's varlen call.

Rows: the `attngen bench --varlen` documents (hd128, 16 heads, 32k tokens, seed 0), the same tokens as equal
documents of 2k (varlen machinery against short documents), and dense batches of 8k and of 2k.
    python benchmarks/varlen_profile.py [--rounds N]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch

import attngen
from attngen.bench import measure, peers, seqlens
from attngen.spec.model import AttentionSpec

HEADS, HD = 16, 128


def _varlen_call(impl: str, kernel: Any, lengths: list[int], longest: int) -> Callable[..., Any]:
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    if impl == "fa4":
        fn = peers.fa4().flash_attn_varlen_func
        return lambda q, k, v: peers.first(fn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                               max_seqlen_k=longest, causal=True))
    return lambda q, k, v: kernel(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                  max_seqlen_k=longest)


def _dense_call(impl: str, kernel: Any) -> Callable[..., Any]:
    if impl == "fa4":
        fn = peers.fa4().flash_attn_func
        return lambda q, k, v: peers.first(fn(q, k, v, causal=True))
    return lambda q, k, v: kernel(q, k, v)


def _row(label: str, impl: str, call: Callable[..., Any], shape: tuple[int, ...], flops: float) -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    qkv = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
           for _ in range(3)]
    dout = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    with seqlens.trusted_seqlens():
        out = call(*qkv)
        fwd = measure.time_ms(lambda: call(*qkv))
        bwd = measure.time_ms(lambda: torch.autograd.grad(out, qkv, dout, retain_graph=True))
        step = measure.time_ms(lambda: torch.autograd.grad(call(*qkv), qkv, dout))
        kernels = measure.kernel_times_us(lambda: torch.autograd.grad(call(*qkv), qkv, dout), steps=5)
        host_fwd = measure.host_us_per_call(lambda: call(*qkv), 30)
        host_step = measure.host_us_per_call(lambda: torch.autograd.grad(call(*qkv), qkv, dout), 30)
    tf = lambda ms, mult: flops * mult / ms / 1e9  # noqa: E731
    print(f"{label:<28} {impl:<8} fwd {fwd:6.3f} ms {tf(fwd, 1):5.0f} TF | bwd {bwd:6.3f} ms {tf(bwd, 2.5):5.0f} TF"
          f" | step {step:6.3f} ms {tf(step, 3.5):5.0f} TF | kernels {sum(kernels.values()):7.1f} us"
          f" | loop us/call fwd {host_fwd:7.1f} step {host_step:7.1f}", flush=True)
    for name, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
        print(f"      {us:9.1f} us  {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only-varlen", action="store_true")
    args = parser.parse_args()
    kernel = attngen.compile(AttentionSpec.model_validate({"head_dim": HD, "dtype": "bf16", "mask": "causal"}))
    opts = seqlens.VarlenOptions()
    mixed = seqlens.doc_lengths(opts.total_tokens, opts.min_len, opts.max_len, opts.seed)
    print(f"{torch.cuda.get_device_name()}; mixed documents: {sorted(mixed)}")
    # (label, document lengths or None for dense, dense length or the max_seqlen passed (0: the longest))
    rows: list[tuple[str, list[int] | None, int]] = [
        ("varlen mixed 18 docs", mixed, 0), ("varlen 16 x 2k", [2048] * 16, 0),
        ("varlen 16 x 2k, max 8k", [2048] * 16, 8192), ("varlen 16 x 2k, max 32k", [2048] * 16, 32768),
        ("dense 4 x 8k", None, 8192), ("dense 16 x 2k", None, 2048)]
    if args.only_varlen:
        rows = [r for r in rows if r[1] is not None]
    for _ in range(args.rounds):
        for label, lengths, dense_len in rows:
            for impl in ("attngen", "fa4"):
                try:
                    if lengths is not None:
                        longest = dense_len or max(lengths)
                        call, shape = _varlen_call(impl, kernel, lengths, longest), (sum(lengths), HEADS, HD)
                        flops = seqlens.causal_flops(lengths, HD, HEADS, passes=1)
                    else:
                        batch = 32768 // dense_len
                        call, shape = _dense_call(impl, kernel), (batch, dense_len, HEADS, HD)
                        flops = seqlens.causal_flops([dense_len] * batch, HD, HEADS, passes=1)
                    _row(label, impl, call, shape, flops)
                except peers.Unavailable as exc:
                    print(f"{label:<28} {impl:<8} unavailable: {exc}")


if __name__ == "__main__":
    main()
