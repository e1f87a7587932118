"""`ContextParallelAttention`: one spec's attention over a sequence split across the ranks of a process group.

Each rank passes its shard of q, k and v (batch, local_seqlen, heads, head_dim), laid out as `layout` says
(`attngen.distributed.shard` cuts a full tensor that way); the call returns this rank's rows of the output,
differentiable. Runtime tensors of the spec that index positions (document ids) are passed whole, over the
global sequence; sinks join each row once, in the merge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..features.score_mod import alibi_slopes
from ..features.variant import variant_of
from ..spec.model import AttentionSpec
from .layout import Layout, check_seqlen, layout_of
from .pairs import CallArgs, CompiledShards, ReferenceShards, ShardKernels
from .plan import CallShape, CpPlan, Rates, Strategy, choose
from .ring import Group, Schedule, gather_backward, gather_forward, ring_backward, ring_forward
from .shard_specs import ShardSpecs

if TYPE_CHECKING:
    import torch

#: The shard kernels: the compiled ones (GPU), or float64 references (any device, for tests).
BACKENDS = ("compiled", "reference")


@dataclass
class _Run:
    """One call's schedule, shard kernels and strategy: what the autograd function runs forward and back."""

    schedule: Schedule
    kernels: ShardKernels
    plan: CpPlan
    group: Group

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        run = ring_forward if self.plan.strategy is Strategy.ring else gather_forward
        return run(self.schedule, self.kernels, q, k, v)

    def backward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        run = ring_backward if self.plan.strategy is Strategy.ring else gather_backward
        return run(self.schedule, self.kernels, *tensors)


def _autograd() -> Any:
    import torch

    from ..runtime.backward import sinks_grad
    from .merge import add_sinks

    class ContextParallelFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, run: _Run, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    sinks: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
            out32, lse = run.forward(q, k, v)
            if sinks is not None:
                add_sinks(out32, lse, sinks.detach())
            out = out32.to(q.dtype)
            ctx.save_for_backward(q, k, v, out, lse, sinks)
            ctx.run = run
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx: Any, dout: torch.Tensor, _dlse: torch.Tensor | None) -> tuple[Any, ...]:
            import torch.distributed as dist

            q, k, v, out, lse, sinks = ctx.saved_tensors
            dout = dout.contiguous()
            dq, dk, dv = ctx.run.backward(dout, q, k, v, out, lse)
            dsinks = None
            if sinks is not None and ctx.needs_input_grad[4]:
                dsinks = sinks_grad(sinks.detach(), dout, out, lse, None)  # this rank's rows' share
                if ctx.run.group.world > 1:
                    dist.all_reduce(dsinks, group=ctx.run.group.group)
                dsinks = dsinks.to(sinks.dtype)
            return None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dsinks

    return ContextParallelFunction


class ContextParallelAttention:
    """`spec`'s attention (an AttentionSpec or a YAML path) over the ranks of `group` (a ProcessGroup, a 1-D
    DeviceMesh, or None for the default group).

    layout: `zigzag` (rank r holds chunks r and 2W-1-r of 2W: even causal work) or `contiguous`.
    strategy: `ring`, `all_gather`, or `auto` (the planner's choice; `plan()` says why).
    backend: `compiled` (attngen's kernels on the GPU) or `reference` (float64, any device: tests).
    """

    def __init__(self, spec: AttentionSpec | str | os.PathLike[str], group: Any = None, *,
                 layout: Layout | str = Layout.zigzag, strategy: Strategy | str = Strategy.auto,
                 backend: str = "compiled", rates: Rates | None = None) -> None:
        if not isinstance(spec, AttentionSpec):
            from ..spec.loader import load_spec

            spec = load_spec(spec)
        self.spec = spec
        self.layout = layout_of(layout)
        try:
            self.strategy = Strategy(strategy)
        except ValueError:
            raise ValueError(f"strategy must be one of {', '.join(s.value for s in Strategy)}, got {strategy!r}") \
                from None
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.backend = backend
        self.rates = rates or Rates()
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("context-parallel attention needs a process group: call torch.distributed."
                             "init_process_group (or init_device_mesh) on every rank first")
        self.group = Group.of(group.get_group() if hasattr(group, "get_group") else group)
        #: Shard shapes every rank has been seen to agree on (checked once per shape: a rank with other shapes
        #: would leave the others waiting in the ring).
        self._agreed: set[tuple[Any, ...]] = set()
        self._specs: dict[tuple[int, int], ShardSpecs] = {}
        #: The compiled shard kernels by spec name, per global lengths (built on first use).
        self._kernels: dict[tuple[int, int], dict[str, Any]] = {}
        self._function = _autograd()

    def __repr__(self) -> str:
        return (f"ContextParallelAttention({self.spec.name}, world={self.group.world}, layout={self.layout.value}, "
                f"strategy={self.strategy.value})")

    def specs(self, seqlen_q: int, seqlen_k: int) -> ShardSpecs:
        key = (seqlen_q, seqlen_k)
        if key not in self._specs:
            self._specs[key] = ShardSpecs(self.spec, seqlen_q, seqlen_k)
        return self._specs[key]

    def _agree(self, q: torch.Tensor, k: torch.Tensor) -> None:
        """Every rank's shards have one shape and dtype (once per shape: one small all-gather)."""
        import torch.distributed as dist

        mine = (tuple(q.shape), tuple(k.shape), str(q.dtype))
        if mine in self._agreed or self.group.world == 1:
            return
        every: list[Any] = [None] * self.group.world
        dist.all_gather_object(every, mine, group=self.group.group)
        if any(tuple(x) != mine for x in every):
            listing = "; ".join(f"rank {r}: q {x[0]}, k {x[1]}, {x[2]}" for r, x in enumerate(every))
            raise ValueError(f"every rank must pass shards of one shape and dtype ({listing}): shard the sequence "
                             f"with attngen.distributed.shard, the same length on every rank")
        self._agreed.add(mine)

    def plan(self, q: torch.Tensor, k: torch.Tensor) -> CpPlan:
        """The strategy for shards like q and k, and why."""
        density = variant_of(self.spec).mask.cost_density
        shape = CallShape(q.shape[0], q.shape[1] * self.group.world, q.shape[2], k.shape[2], q.shape[3],
                          q.element_size(), density)
        return choose(self.group.world, shape, self.strategy, self.rates)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, softmax_scale: float | None = None,
                 return_lse: bool = False, **variant_args: Any) -> Any:
        """This rank's rows of the output (and its fp32 LSE (batch, heads, local_seqlen) with return_lse)."""
        import torch

        from .arguments import check_shards, split_arguments

        scale = check_shards(self.spec, q, k, v, softmax_scale, self.backend)
        self._agree(q, k)
        world = self.group.world
        seqlen_q, seqlen_k = q.shape[1] * world, k.shape[1] * world
        check_seqlen(seqlen_q, world, self.layout, "q's global sequence")
        check_seqlen(seqlen_k, world, self.layout, "k's global sequence")
        specs = self.specs(seqlen_q, seqlen_k)
        parts = split_arguments(self.spec, specs, variant_args, q)
        for name in specs.computed:  # ALiBi's standard slopes, a tensor of the offset spec
            parts.tensors[name] = q.new_tensor(alibi_slopes(q.shape[2]), dtype=torch.float32)
        args = CallArgs(scale, parts.tensors, parts.scalars)
        kernels: ShardKernels = ReferenceShards(specs, args) if self.backend == "reference" else \
            CompiledShards(specs, args, self._kernels.setdefault((seqlen_q, seqlen_k), {}))

        def classify(qr: tuple[int, int], kr: tuple[int, int]) -> Any:
            return specs.classify(qr, kr, q.shape[0], q.shape[2], parts.bounds, parts.mask_scalars)

        schedule = Schedule(self.layout, self.group, seqlen_q, seqlen_k, classify, not specs.positional_mod)
        run = _Run(schedule, kernels, self.plan(q, k), self.group)
        out, lse = self._function.apply(run, q, k, v, parts.sinks)
        return (out, lse) if return_lse else out

