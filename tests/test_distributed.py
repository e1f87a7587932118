"""Context-parallel attention on the CPU: gloo process groups of 2 and 4 ranks, the float64 reference as the
per-shard kernel, against the float64 reference on the whole sequence (forward and backward, every layout,
ring and all-gather), and the schedule's pure parts (layouts, task classification, load balance, the plan)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.distributed_cases import SPECS, Case, spec_of

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(world: int, cases: list[Case], tmp_path: Path) -> list[dict]:
    import torch.multiprocessing as mp

    from tests.distributed_cases import worker

    init = f"tcp://127.0.0.1:{_free_port()}"
    mp.spawn(worker, args=(world, init, cases, str(tmp_path)), nprocs=world, join=True)
    return json.loads((tmp_path / "outcomes.json").read_text())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[Case, dict]:
    cases = [Case(name, layout) for name in SPECS for layout in ("zigzag", "contiguous")]
    cases += [Case(name, "zigzag", "all_gather") for name in ("causal", "document", "sinks_window")]
    cases += [Case("causal", "zigzag", batch=1, heads=2, kv_heads=2, seqlen=12, seed=3)]
    found = _spawn(2, cases, tmp_path_factory.mktemp("cp2"))
    return {Case(**o["case"]): o for o in found}


def test_ranks_that_disagree_on_shapes_get_an_error(two_ranks: dict) -> None:
    message = two_ranks[Case("disagree")]["failure"]
    assert "every rank must pass shards of one shape" in message and "rank 1: q (1, 16, 2, 64)" in message


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[Case, dict]:
    cases = [Case(name, layout, seqlen=24) for name in ("causal", "window", "document", "alibi_causal")
             for layout in ("zigzag", "contiguous")]
    cases += [Case("chunked", "zigzag", "all_gather", seqlen=24)]
    cases += [Case("sinks_window", "contiguous", seqlen=24)]  # the ring stops after step 1
    found = _spawn(4, cases, tmp_path_factory.mktemp("cp4"))
    return {Case(**o["case"]): o for o in found}


def _check(outcome: dict) -> None:
    assert outcome["failure"] is None, outcome["failure"]
    for name, err in outcome["errors"].items():
        assert err == err, f"{name}: NaN or inf in the result"
        assert err < 1e-12, f"{name}: relative error {err:.3e} against float64 ({outcome['case']})"


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("name", list(SPECS))
def test_two_ranks_ring_match_the_whole_sequence(two_ranks: dict, name: str, layout: str) -> None:
    _check(two_ranks[Case(name, layout)])


@pytest.mark.parametrize("name", ["causal", "document", "sinks_window"])
def test_two_ranks_all_gather_match(two_ranks: dict, name: str) -> None:
    _check(two_ranks[Case(name, "zigzag", "all_gather")])


def test_odd_sizes_and_no_gqa(two_ranks: dict) -> None:
    _check(two_ranks[Case("causal", "zigzag", batch=1, heads=2, kv_heads=2, seqlen=12, seed=3)])


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("name", ["causal", "window", "document", "alibi_causal"])
def test_four_ranks_ring_match(four_ranks: dict, name: str, layout: str) -> None:
    _check(four_ranks[Case(name, layout, seqlen=24)])


def test_four_ranks_all_gather(four_ranks: dict) -> None:
    _check(four_ranks[Case("chunked", "zigzag", "all_gather", seqlen=24)])


def test_four_ranks_ring_cut_short_by_a_window(four_ranks: dict) -> None:
    _check(four_ranks[Case("sinks_window", "contiguous", seqlen=24)])


def test_spec_of_builds() -> None:
    assert spec_of(Case("document")).mask.tensors
