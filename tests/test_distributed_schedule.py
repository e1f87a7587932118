"""The pure parts of context-parallel attention: layouts, the derived specs, task classification and merging,
the zigzag load balance, the strategy choice, and argument errors (no process group needed beyond one rank)."""

from __future__ import annotations

import pytest

from attngen import expr as lang
from attngen.distributed import Layout, Strategy, choose, pieces
from attngen.distributed.layout import Piece, check_seqlen
from attngen.distributed.pairs import step_tasks
from attngen.distributed.plan import CallShape
from attngen.distributed.ring import Group, Schedule
from attngen.distributed.shard_specs import ShardSpecs
from tests.distributed_cases import Case, spec_of

torch = pytest.importorskip("torch")


def test_zigzag_is_the_head_tail_layout() -> None:
    # rank r holds chunks r and 2W-1-r: PyTorch's head-tail load balancer gives the same indices.
    got = [[p.start for p in pieces(Layout.zigzag, r, 4, 16)] for r in range(4)]
    assert got == [[0, 14], [2, 12], [4, 10], [6, 8]]
    assert pieces(Layout.contiguous, 2, 4, 16) == (Piece(8, 4, 0),)


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_shard_and_unshard_round_trip(layout: str) -> None:
    from attngen.distributed import shard, unshard

    x = torch.arange(2 * 24 * 3).view(2, 24, 3)
    parts = [shard(x, r, 3, layout) for r in range(3)]
    assert all(p.shape == (2, 8, 3) for p in parts)
    assert torch.equal(unshard(parts, layout), x)


def test_uneven_sequence_is_refused_with_a_remedy() -> None:
    with pytest.raises(ValueError, match="multiple of 8: pad the sequence"):
        check_seqlen(20, 4, Layout.zigzag)
    with pytest.raises(ValueError, match="layout must be one of 'contiguous', 'zigzag'"):
        pieces("ring", 0, 2, 8)  # type: ignore[arg-type]


def _schedule(name: str, rank: int, world: int, seqlen: int, layout: Layout = Layout.zigzag) -> Schedule:
    specs = ShardSpecs(spec_of(Case(name)), seqlen, seqlen)

    def classify(q: tuple[int, int], kv: tuple[int, int]) -> lang.TileClass:
        return specs.classify(q, kv, 1, 1)

    return Schedule(layout, Group(None, rank, world), seqlen, seqlen, classify, not specs.positional_mod)


def _work(schedule: Schedule) -> float:
    """Score-matrix elements a rank computes over every step (a PARTIAL diagonal pair counts half)."""
    total = 0.0
    for step in range(schedule.group.world):
        for t in schedule.tasks(schedule.source(step)):
            total += t.q_len * t.kv_len * (0.5 if t.cls is lang.TileClass.PARTIAL else 1.0)
    return total


def test_zigzag_balances_causal_work_and_contiguous_does_not() -> None:
    zig = [_work(_schedule("causal", r, 4, 64)) for r in range(4)]
    flat = [_work(_schedule("causal", r, 4, 64, Layout.contiguous)) for r in range(4)]
    assert len(set(zig)) == 1 and sum(zig) == 64 * 64 / 2
    assert flat[3] > 3 * flat[0]


def test_zigzag_causal_steps_merge_full_pairs_into_one_task() -> None:
    s = _schedule("causal", 1, 4, 64)  # chunks 1 and 6 of 8 (8 positions each)
    own = s.tasks(1)
    assert sorted((t.q_local, t.kv_local, t.cls.name) for t in own) == [
        (0, 0, "PARTIAL"), (8, 0, "FULL"), (8, 8, "PARTIAL")]
    earlier = s.tasks(0)  # rank 0's chunks 0 and 7: all queries see chunk 0; none sees chunk 7
    assert [(t.q_local, t.q_len, t.kv_local, t.kv_len, t.cls.name) for t in earlier] == [(0, 16, 0, 8, "FULL")]
    later = s.tasks(2)  # chunks 2 and 5: only chunk 6's queries see them, whole
    assert [(t.q_local, t.q_len, t.kv_local, t.kv_len, t.cls.name) for t in later] == [(8, 8, 0, 16, "FULL")]


def test_positional_score_mods_do_not_merge_pieces() -> None:
    s = _schedule("alibi_causal", 1, 4, 64)
    assert not s.mergeable
    assert all(t.q_len == 8 and t.kv_len == 8 for step in range(4) for t in s.tasks(s.source(step)))


def test_step_tasks_skip_empty_pairs() -> None:
    a, b = Piece(0, 4, 0), Piece(4, 4, 4)
    cls = {(0, 0): lang.TileClass.PARTIAL, (0, 4): lang.TileClass.EMPTY, (4, 0): lang.TileClass.FULL,
           (4, 4): lang.TileClass.PARTIAL}
    tasks = step_tasks((a, b), (a, b), lambda p, k: cls[p.start, k.start], True)
    assert len(tasks) == 3 and all(t.cls is not lang.TileClass.EMPTY for t in tasks)


def test_derived_specs_read_global_positions() -> None:
    specs = ShardSpecs(spec_of(Case("document")), 4096, 4096)
    assert specs.offset.mask.expr is not None and "q_idx + cp_q_offset" in specs.offset.mask.expr
    assert specs.offset.mask.tensors["doc"].shape == ("batch", 4096)
    assert specs.unmasked is not None and specs.unmasked.mask.kind.value == "none"
    alibi = ShardSpecs(spec_of(Case("alibi_causal")), 64, 64)
    assert alibi.unmasked is None and "cp_alibi_slopes" in alibi.computed
    sinks = ShardSpecs(spec_of(Case("sinks_window")), 64, 64)
    assert sinks.offset.sinks.value == "none"


def test_window_pairs_shift_into_window_specs() -> None:
    specs = ShardSpecs(spec_of(Case("causal")), 64, 64)
    diagonal = specs.band(16, 16, 8, 8)
    assert diagonal is not None and diagonal.mask.kind.value == "causal"
    below = specs.band(24, 16, 8, 8)  # queries 8 positions after the keys: every key visible up to +8
    assert below is not None and below.mask.window == (-1, 8)
    assert specs.band(16, 24, 8, 8) is None  # keys after the queries: no window states it; the offset spec runs
    assert ShardSpecs(spec_of(Case("document")), 64, 64).band(0, 0, 8, 8) is None


def test_the_plan_says_why() -> None:
    long = CallShape(batch=1, seqlen=131072, heads=32, kv_heads=8, head_dim=128, elem_bytes=2, density=0.5)
    ring = choose(2, long)
    assert ring.strategy is Strategy.ring and "hides behind the compute" in ring.reason
    short = CallShape(batch=1, seqlen=2048, heads=32, kv_heads=8, head_dim=128, elem_bytes=2, density=0.5)
    gather = choose(8, short)
    assert gather.strategy is Strategy.all_gather and "too short to hide" in gather.reason
    forced = choose(8, short, Strategy.ring)
    assert forced.strategy is Strategy.ring and forced.reason.startswith("asked for ring")


def test_bad_arguments_name_what_is_allowed() -> None:
    import torch.distributed as dist

    from attngen.distributed import ContextParallelAttention

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    try:
        cp = ContextParallelAttention(spec_of(Case("document")), backend="reference")
        q = torch.randn(1, 8, 4, 64, dtype=torch.float64)
        k = torch.randn(1, 8, 2, 64, dtype=torch.float64)
        with pytest.raises(ValueError, match="takes the keyword arguments: doc; missing \\['doc'\\]"):
            cp(q, k, k)
        with pytest.raises(ValueError, match="head_dim is 32"):
            cp(q[..., :32], k, k)
        with pytest.raises(ValueError, match="must be a CUDA tensor of bfloat16"):
            ContextParallelAttention(spec_of(Case("causal")))(q, k, k)
        with pytest.raises(ValueError, match="strategy must be one of auto, ring, all_gather"):
            ContextParallelAttention(spec_of(Case("causal")), strategy="tree")
        with pytest.raises(ValueError, match="backend must be one of compiled, reference"):
            ContextParallelAttention(spec_of(Case("causal")), backend="cuda")
    finally:
        dist.destroy_process_group()


def test_ring_model_scales_compute_by_square_and_bytes_linearly() -> None:
    from attngen.distributed.plan import ring_step

    shape = CallShape(batch=1, seqlen=1 << 20, heads=16, kv_heads=16, head_dim=128, elem_bytes=2, density=0.5)
    two, eight = ring_step(2, shape), ring_step(8, shape)
    assert two.fwd_compute_s / eight.fwd_compute_s == pytest.approx(16)
    assert two.fwd_bytes / eight.fwd_bytes == pytest.approx(4)
    assert eight.bwd_bytes == 3 * eight.fwd_bytes  # K, V and fp32 dK, dV
    assert eight.hidden and eight.call_s < ring_step(1, shape).call_s / 7.5


def test_a_window_over_contiguous_shards_stops_the_ring_early() -> None:
    # window [3, 0] with 6 positions a rank: only the previous rank's keys are needed, so no K/V travels twice
    assert _schedule("sinks_window", 0, 4, 24, Layout.contiguous).last_step() == 1
    assert _schedule("causal", 0, 4, 24, Layout.contiguous).last_step() == 3
    assert _schedule("sinks_window", 0, 4, 24).last_step() == 3  # zigzag: the tail chunk's neighbour is 3 steps on


def test_no_process_group_is_a_clear_error() -> None:
    import torch.distributed as dist

    from attngen.distributed import ContextParallelAttention

    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="needs a process group: call torch.distributed.init_process_group"):
        ContextParallelAttention(spec_of(Case("causal")), backend="reference")
