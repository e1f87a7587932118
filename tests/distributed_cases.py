"""What the context-parallel tests run in each rank of a process group (gloo on the CPU, NCCL on GPUs): a case
builds full-sequence inputs identically on every rank, runs ContextParallelAttention on the rank's shards,
gathers the outputs and gradients, and rank 0 compares them with the float64 reference on the whole sequence."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

SPECS: dict[str, dict[str, Any]] = {
    "none": {"mask": "none"},
    "causal": {"mask": "causal"},
    "window": {"mask": {"kind": "sliding_window", "window": [5, 2]}},
    "chunked": {"mask": {"kind": "chunked", "chunk": 6}},
    "prefix_lm": {"mask": "prefix_lm"},
    "document": {"mask": {"expr": "doc[b, q_idx] == doc[b, kv_idx] and kv_idx <= q_idx",
                          "tensors": {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}}},
    "alibi_causal": {"mask": "causal", "score_mod": {"alibi": "standard"}},
    "softcap_causal": {"mask": "causal", "score_mod": {"softcap": 5.0}},
    "sinks_window": {"mask": {"kind": "sliding_window", "window": [3, 0]}, "sinks": "learnable"},
    "streaming": {"mask": {"expr": "kv_idx <= q_idx and (q_idx - kv_idx <= 4 or kv_idx < 2)"}},
}


@dataclass(frozen=True)
class Case:
    spec: str
    layout: str = "zigzag"
    strategy: str = "ring"
    batch: int = 2
    seqlen: int = 16
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    seed: int = 0


@dataclass
class Outcome:
    case: Case
    errors: dict[str, float] = field(default_factory=dict)
    failure: str | None = None


def spec_of(case: Case, dtype: str = "bf16") -> Any:
    from attngen.spec.model import AttentionSpec

    return AttentionSpec.model_validate({"name": f"cp_{case.spec}", "head_dim": case.head_dim, "dtype": dtype,
                                         **SPECS[case.spec]})


def inputs(case: Case, device: str, dtype: Any) -> dict[str, Any]:
    """Full-sequence q, k, v, dout and the spec's runtime arguments, the same on every rank (seeded)."""
    import torch

    g = torch.Generator().manual_seed(case.seed)
    b, s, h, kvh, d = case.batch, case.seqlen, case.heads, case.kv_heads, case.head_dim

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)

    data = {"q": randn(b, s, h, d), "k": randn(b, s, kvh, d), "v": randn(b, s, kvh, d), "dout": randn(b, s, h, d)}
    extra: dict[str, Any] = {}
    if case.spec == "prefix_lm":
        extra["prefix_len"] = torch.randint(0, s, (b,), generator=g, dtype=torch.int32).to(device)
    if case.spec == "document":
        cuts = torch.sort(torch.randint(0, s, (b, 3), generator=g)).values
        extra["doc"] = (torch.arange(s)[None, :, None] >= cuts[:, None, :]).sum(-1).to(torch.int32).to(device)
    if case.spec == "sinks_window":
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        extra["sinks"] = torch.randn(h, generator=g, dtype=torch.float64).to(device=device, dtype=wide)
    data["extra"] = extra
    return data


def run_case(case: Case, backend: str, device: str, dtype: Any) -> Outcome:
    """This rank's part of one case; rank 0's Outcome holds the errors against the float64 reference."""
    import torch
    import torch.distributed as dist

    import attngen
    from attngen.distributed import ContextParallelAttention, shard, unshard

    rank, world = dist.get_rank(), dist.get_world_size()
    spec = spec_of(case)
    data = inputs(case, device, dtype)
    extra = dict(data["extra"])
    sinks = extra.pop("sinks", None)
    if sinks is not None:
        sinks = sinks.clone().requires_grad_(True)
        extra["sinks"] = sinks
    q, k, v = (shard(data[n], rank, world, case.layout).requires_grad_(True) for n in ("q", "k", "v"))
    attention = ContextParallelAttention(spec, layout=case.layout, strategy=case.strategy, backend=backend)
    out = attention(q, k, v, **extra)
    out.backward(shard(data["dout"], rank, world, case.layout))
    gathered = {}
    for name, t in (("out", out), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.detach().contiguous())
        gathered[name] = unshard(parts, case.layout)
    outcome = Outcome(case)
    if rank != 0:
        return outcome
    ref_args = {n: x for n, x in data["extra"].items()}
    ref_out, _ = attngen.reference(spec, data["q"], data["k"], data["v"], **ref_args)
    ref = attngen.reference.grads(spec, data["q"], data["k"], data["v"], data["dout"], **ref_args)
    ref["out"] = ref_out
    for name in ("out", "dq", "dk", "dv"):
        expect = torch.from_numpy(ref[name])
        got = gathered[name].double().cpu()
        outcome.errors[name] = _relative(got, expect)
    if sinks is not None:
        outcome.errors["dsinks"] = _relative(sinks.grad.double().cpu(), torch.from_numpy(ref["dsinks"]))
    if backend == "compiled":
        single = _single_gpu(spec, data)
        for name, t in single.items():
            outcome.errors[f"{name}_vs_single"] = _relative(gathered[name].double().cpu(), t.double().cpu())
            outcome.errors[f"single_{name}"] = _relative(t.double().cpu(), torch.from_numpy(ref[name]))
    return outcome


def _single_gpu(spec: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The single-GPU kernel on the whole sequence: its output and gradients."""
    import attngen

    kernel = attngen.compile(spec)
    q, k, v = (data[n].detach().clone().requires_grad_(True) for n in ("q", "k", "v"))
    out = kernel(q, k, v, **data["extra"])
    out.backward(data["dout"])
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _relative(got: Any, expect: Any) -> float:
    import torch

    if not torch.isfinite(got).all():
        return float("nan")
    return float((got - expect).norm() / expect.norm().clamp_min(1e-30))


def worker(rank: int, world: int, init: str, cases: list[Case], out_dir: str, backend: str = "reference") -> None:
    """A spawned rank: join the group, run every case, and write rank 0's outcomes as JSON."""
    import torch
    import torch.distributed as dist

    from attngen.distributed import ContextParallelAttention

    cuda = backend == "compiled"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=rank, world_size=world)
    device = f"cuda:{rank}" if cuda else "cpu"
    outcomes = []
    dtype = torch.bfloat16 if cuda else torch.float64
    for case in cases:
        # A failure ends the run (ranks that went on would wait in mismatched collectives); spawn reports it.
        outcomes.append(run_case(case, backend, device, dtype))
    if world > 1:  # ranks that disagree on the shards' shape get an error, not a hang
        attention = ContextParallelAttention(spec_of(Case("causal")), backend=backend)
        shape = (1, 8 + 8 * rank, 2, 64)
        try:
            attention(*(torch.randn(shape, dtype=dtype, device=device) for _ in range(3)))
        except ValueError as e:
            outcomes.append(Outcome(Case("disagree"), failure=str(e)))
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out_dir, "outcomes.json"), "w") as f:
            json.dump([asdict(o) for o in outcomes], f, indent=1)
