"""What one rank computes at one ring step: the tasks (query rows x key rows with their class), and the shard
kernels that run a task forward and backward.

A step pairs this rank's query pieces with the pieces of the keys it holds. Each pair is classified over
global positions by the mask's interval arithmetic: EMPTY pairs are skipped (no kernel runs), FULL and PARTIAL
ones become tasks. FULL pairs that share their keys (or queries) and read no position are merged into one task
over the rank's whole query (or key) shard, so a zigzag causal step runs one kernel where it can.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .. import expr as lang
from .layout import Piece
from .shard_specs import KV_OFFSET, Q_OFFSET, SEQLEN_K, SEQLEN_Q, ShardSpecs

if TYPE_CHECKING:
    import torch

FULL, PARTIAL = lang.TileClass.FULL, lang.TileClass.PARTIAL


@dataclass(frozen=True)
class Task:
    """Local query rows [q_local, +q_len) against local key rows [kv_local, +kv_len) of the keys held; q_start and
    kv_start are the global positions of their first rows (meaningful for one piece each; a merged FULL task
    spans pieces and reads no position)."""

    q_local: int
    q_len: int
    kv_local: int
    kv_len: int
    q_start: int
    kv_start: int
    cls: lang.TileClass


def step_tasks(q_pieces: tuple[Piece, ...], kv_pieces: tuple[Piece, ...],
               classify: Callable[[Piece, Piece], lang.TileClass], mergeable: bool) -> list[Task]:
    """The tasks of one step: every non-EMPTY pair, FULL pairs merged where `mergeable` (no position read)."""
    classes = {(i, j): classify(p, k) for i, p in enumerate(q_pieces) for j, k in enumerate(kv_pieces)}
    tasks: list[Task] = []
    done: set[tuple[int, int]] = set()
    if mergeable and len(q_pieces) > 1:
        for j, kp in enumerate(kv_pieces):  # a key piece every query piece sees whole: one task over all rows
            if all(classes[i, j] is FULL for i in range(len(q_pieces))):
                rows = sum(p.length for p in q_pieces)
                tasks.append(Task(0, rows, kp.local, kp.length, q_pieces[0].start, kp.start, FULL))
                done.update((i, j) for i in range(len(q_pieces)))
    if mergeable and len(kv_pieces) > 1:
        for i, qp in enumerate(q_pieces):  # a query piece that sees every key piece whole
            if all(classes[i, j] is FULL and (i, j) not in done for j in range(len(kv_pieces))):
                keys = sum(k.length for k in kv_pieces)
                tasks.append(Task(qp.local, qp.length, 0, keys, qp.start, kv_pieces[0].start, FULL))
                done.update((i, j) for j in range(len(kv_pieces)))
    for (i, j), cls in classes.items():
        if cls is not lang.TileClass.EMPTY and (i, j) not in done:
            p, k = q_pieces[i], kv_pieces[j]
            tasks.append(Task(p.local, p.length, k.local, k.length, p.start, k.start, cls))
    return tasks


class ShardKernels(Protocol):
    """Attention of one task: forward (out, fp32 LSE (batch, heads, rows)) and backward (dq, dk, dv) given the
    rows' global output and LSE."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, task: Task) -> tuple[Any, Any]: ...

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, task: Task) -> tuple[Any, Any, Any]: ...


@dataclass
class CallArgs:
    """What every task's kernel call is given: the scale and the runtime arguments under the offset spec's
    names (tensors whole; the per-task offsets are added per call)."""

    softmax_scale: float
    tensors: Mapping[str, Any]
    scalars: Mapping[str, float]

    def offset_kwargs(self, specs: ShardSpecs, task: Task) -> dict[str, Any]:
        return {**self.tensors, **self.scalars, Q_OFFSET: task.q_start, KV_OFFSET: task.kv_start,
                SEQLEN_Q: specs.seqlen_q, SEQLEN_K: specs.seqlen_k}


class ReferenceShards:
    """Float64 shard kernels (attngen.reference) on any device: the CPU tests' per-shard kernel. Every task runs
    the offset spec, so the ring schedule, the merge and the backward are checked against exact arithmetic."""

    def __init__(self, specs: ShardSpecs, args: CallArgs) -> None:
        from ..features.variant import variant_of

        self.specs = specs
        self.args = args
        self._wanted = {a.name for a in variant_of(specs.offset).arguments() if not a.computed}

    def _kwargs(self, task: Task) -> dict[str, Any]:
        every = self.args.offset_kwargs(self.specs, task)
        return {n: x for n, x in every.items() if n in self._wanted}

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, task: Task) -> tuple[Any, Any]:
        import torch

        from ..reference.variant import attention

        out, lse = attention(self.specs.offset, q, k, v, softmax_scale=self.args.softmax_scale, **self._kwargs(task))
        return torch.from_numpy(out).to(q.device), torch.from_numpy(lse).to(q.device)

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, task: Task) -> tuple[Any, Any, Any]:
        import torch

        from ..reference.variant import grads_given

        g = grads_given(self.specs.offset, q, k, v, dout, out, lse, softmax_scale=self.args.softmax_scale,
                        **self._kwargs(task))
        return tuple(torch.from_numpy(g[n]).to(q.device) for n in ("dq", "dk", "dv"))  # type: ignore[return-value]


class CompiledShards:
    """The compiled kernels of each task (attngen.compile, built on first use for q's GPU): FULL tasks run the
    unmasked spec, PARTIAL ones the window spec of their shift where the mask is a window, else the offset spec."""

    def __init__(self, specs: ShardSpecs, args: CallArgs, kernels: dict[str, Any] | None = None) -> None:
        self.specs = specs
        self.args = args
        #: Compiled kernels by spec name (a dict the caller keeps between calls).
        self._kernels: dict[str, Any] = {} if kernels is None else kernels

    def kernel_for(self, task: Task) -> tuple[Any, dict[str, Any]]:
        """The kernel of a task and its keyword arguments."""
        spec = self.specs.unmasked if task.cls is FULL else None
        if spec is None and task.cls is PARTIAL:
            spec = self.specs.band(task.q_start, task.kv_start, task.q_len, task.kv_len)
        spec = spec or self.specs.offset
        kernel = self._kernels.get(spec.name)
        if kernel is None:
            from ..runtime.kernel import compile as compile_spec

            kernel = self._kernels[spec.name] = compile_spec(spec)
        wanted = {a.name for a in kernel.variant.arguments if not a.computed}
        every = self.args.offset_kwargs(self.specs, task)
        return kernel, {n: x for n, x in every.items() if n in wanted}

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, task: Task) -> tuple[Any, Any]:
        kernel, kwargs = self.kernel_for(task)
        return kernel(q, k, v, softmax_scale=self.args.softmax_scale, return_lse=True, **kwargs)

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, task: Task) -> tuple[Any, Any, Any]:
        kernel, kwargs = self.kernel_for(task)
        return kernel.grads_given(dout, q, k, v, out, lse, softmax_scale=self.args.softmax_scale, **kwargs)
