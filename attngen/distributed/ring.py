"""The ring and all-gather schedules of context-parallel attention over a torch.distributed process group.

Ring: at step s rank r holds the keys and values of rank (r - s) mod W. It posts their send to rank r + 1 and
the receive of the next ones from rank r - 1 (point-to-point, asynchronous), runs its tasks on what it holds
while they travel, and folds each task's output into its rows by LSE. The backward circulates K and V the same
way, and with them the fp32 dK/dV accumulators of the block: rank r adds its share of the block it holds and
passes the sum on; after W steps every block's sum arrives at its owner.

All-gather: every rank gathers the whole K and V once, runs its tasks against every block, and in the backward
the dK/dV shares are summed to their owners with one reduce-scatter. For short contexts, where a ring step's
compute is too short to hide a transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import expr as lang
from .layout import Layout, Piece, pieces
from .merge import merge_into
from .pairs import ShardKernels, Task, step_tasks

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Group:
    """A process group as the schedules see it: this rank, the world, and the global ranks of the neighbours."""

    group: Any
    rank: int
    world: int

    @classmethod
    def of(cls, group: Any) -> Group:
        import torch.distributed as dist

        return cls(group, dist.get_rank(group), dist.get_world_size(group))

    def global_rank(self, rank: int) -> int:
        import torch.distributed as dist

        return dist.get_global_rank(self.group, rank % self.world) if self.group is not None else rank % self.world

    def shift(self, tensors: Sequence[torch.Tensor], by: int = 1) -> Callable[[], list[torch.Tensor]]:
        """Send `tensors` to rank + by and receive as many of the same shapes from rank - by; returns a wait that
        gives what arrived. Nothing blocks until then."""
        import torch
        import torch.distributed as dist

        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t.contiguous(), self.global_rank(self.rank + by), self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, t, self.global_rank(self.rank - by), self.group) for t in received]
        works = dist.batch_isend_irecv(ops)

        def wait() -> list[torch.Tensor]:
            for w in works:
                w.wait()
            return received

        return wait


@dataclass(frozen=True)
class Schedule:
    """Which tasks each step runs: the rank's query pieces against the key pieces of the step's source rank."""

    layout: Layout
    group: Group
    seqlen_q: int
    seqlen_k: int
    classify: Callable[[tuple[int, int], tuple[int, int]], lang.TileClass]
    mergeable: bool

    def q_pieces(self) -> tuple[Piece, ...]:
        return pieces(self.layout, self.group.rank, self.group.world, self.seqlen_q)

    def tasks(self, source: int, rank: int | None = None) -> list[Task]:
        """The tasks of `rank` (this one by default) against the keys of rank `source`."""
        world = self.group.world
        mine = pieces(self.layout, self.group.rank if rank is None else rank, world, self.seqlen_q)
        kv = pieces(self.layout, source, world, self.seqlen_k)

        def cls(p: Piece, k: Piece) -> lang.TileClass:
            return self.classify((p.start, p.stop - 1), (k.start, k.stop - 1))

        return step_tasks(mine, kv, cls, self.mergeable)

    def last_step(self) -> int:
        """The last step at which some rank has a task: the ring stops there, and no K/V travels further (a
        window over contiguous shards needs only the neighbours' keys). Every rank computes the same answer."""
        world = self.group.world
        live = [s for s in range(world) if any(self.tasks((r - s) % world, r) for r in range(world))]
        return max(live, default=0)

    def source(self, step: int) -> int:
        return (self.group.rank - step) % self.group.world


def _rows(x: torch.Tensor, start: int, length: int) -> torch.Tensor:
    return x.narrow(1, start, length)


def _forward_block(kernels: ShardKernels, tasks: list[Task], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   acc_out: torch.Tensor, acc_lse: torch.Tensor) -> None:
    for t in tasks:
        out, lse = kernels.forward(_rows(q, t.q_local, t.q_len), _rows(k, t.kv_local, t.kv_len),
                                   _rows(v, t.kv_local, t.kv_len), t)
        merge_into(acc_out, acc_lse, out, lse, t.q_local, t.q_len)


def accumulator_dtype(x: torch.Tensor) -> torch.dtype:
    """fp32 for 16-bit inputs, the inputs' own for wider ones (float64 references stay exact)."""
    import torch

    return torch.promote_types(x.dtype, torch.float32)


def _zeros(x: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.zeros(x.shape, dtype=accumulator_dtype(x), device=x.device)


def _accumulators(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    batch, rows, heads, _ = q.shape
    acc_lse = torch.full((batch, heads, rows), float("-inf"), dtype=accumulator_dtype(q), device=q.device)
    return _zeros(q), acc_lse


def ring_forward(schedule: Schedule, kernels: ShardKernels, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's fp32 (out, lse) over the whole key sequence, K and V passed around the ring."""
    acc_out, acc_lse = _accumulators(q)
    last = schedule.last_step()
    for step in range(last + 1):
        wait = schedule.group.shift((k, v)) if step < last else None
        _forward_block(kernels, schedule.tasks(schedule.source(step)), q, k, v, acc_out, acc_lse)
        if wait is not None:
            k, v = wait()
    return acc_out, acc_lse


def _backward_block(kernels: ShardKernels, tasks: list[Task], grads: Sequence[torch.Tensor],
                    tensors: Sequence[torch.Tensor]) -> None:
    """Add the block's tasks' gradients: grads (dq, dk, dv) fp32, tensors (dout, q, k, v, out, lse)."""
    dq, dk, dv = grads
    dout, q, k, v, out, lse = tensors
    for t in tasks:
        g = kernels.backward(_rows(dout, t.q_local, t.q_len), _rows(q, t.q_local, t.q_len),
                             _rows(k, t.kv_local, t.kv_len), _rows(v, t.kv_local, t.kv_len),
                             _rows(out, t.q_local, t.q_len), lse.narrow(2, t.q_local, t.q_len), t)
        _rows(dq, t.q_local, t.q_len).add_(g[0])
        _rows(dk, t.kv_local, t.kv_len).add_(g[1])
        _rows(dv, t.kv_local, t.kv_len).add_(g[2])


def ring_backward(schedule: Schedule, kernels: ShardKernels, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """This rank's (dq, dk, dv) in the accumulator dtype: K and V travel as in the forward, each block's dK/dV
    sum with them, one step behind, and goes to its owner after the last step (the next rank when the ring went
    all the way round)."""
    world, last = schedule.group.world, schedule.last_step()
    dq = _zeros(q)
    arriving: Callable[[], list[torch.Tensor]] | None = None
    for step in range(last + 1):
        wait_kv = schedule.group.shift((k, v)) if step < last else None
        dk, dv = _zeros(k), _zeros(v)
        _backward_block(kernels, schedule.tasks(schedule.source(step)), (dq, dk, dv), (dout, q, k, v, out, lse))
        if arriving is not None:
            before_k, before_v = arriving()
            dk.add_(before_k)
            dv.add_(before_v)
        if step < last:
            arriving = schedule.group.shift((dk, dv))
            assert wait_kv is not None
            k, v = wait_kv()
    home = (world - last) % world  # the block of rank r - last, held here: its owner is that many ranks on
    if home == 0:
        return dq, dk, dv
    dk, dv = schedule.group.shift((dk, dv), by=home)()
    return dq, dk, dv


def _gather(group: Group, x: torch.Tensor) -> list[torch.Tensor]:
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(group.world)]
    dist.all_gather(parts, x.contiguous(), group=group.group)
    return parts


def gather_forward(schedule: Schedule, kernels: ShardKernels, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's fp32 (out, lse), every rank's K and V gathered first."""
    acc_out, acc_lse = _accumulators(q)
    ks, vs = _gather(schedule.group, k), _gather(schedule.group, v)
    for source in range(schedule.group.world):
        _forward_block(kernels, schedule.tasks(source), q, ks[source], vs[source], acc_out, acc_lse)
    return acc_out, acc_lse


def gather_backward(schedule: Schedule, kernels: ShardKernels, dout: torch.Tensor, q: torch.Tensor,
                    k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) in the accumulator dtype: every block's dK/dV share computed here, then summed onto its owner."""
    import torch

    group = schedule.group
    ks, vs = _gather(group, k), _gather(group, v)
    dq = _zeros(q)
    dks = torch.zeros((group.world, *k.shape), dtype=accumulator_dtype(k), device=k.device)
    dvs = torch.zeros_like(dks)
    for source in range(group.world):
        _backward_block(kernels, schedule.tasks(source), (dq, dks[source], dvs[source]),
                        (dout, q, ks[source], vs[source], out, lse))
    return (dq, *(_reduce_scatter(group, d) for d in (dks, dvs)))


def _reduce_scatter(group: Group, stacked: torch.Tensor) -> torch.Tensor:
    """Sum of every rank's `stacked[r]`, on rank r."""
    import torch.distributed as dist

    if group.world == 1:
        return stacked[0]
    if dist.get_backend(group.group) == "nccl":
        mine = stacked[0].clone()
        dist.reduce_scatter_tensor(mine, stacked, group=group.group)
        return mine
    dist.all_reduce(stacked, group=group.group)  # gloo has no reduce-scatter
    return stacked[group.rank].clone()
