"""The Hopper backward's dK/dV dispatch order under a causal mask: the grid's last chains dealt heaviest block first
(families/sm90_tail_order.py)."""

from __future__ import annotations

import itertools

import pytest

from attngen.families import sm90_tail_order as order
from attngen.planning.archs import arch_info
from attngen.planning.ir_bwd import HopperBwdPlan
from attngen.planning.planner_bwd import plan_bwd
from attngen.spec.model import Arch, AttentionSpec

H100 = arch_info(Arch.sm90)


@pytest.mark.parametrize(("kv_blocks", "chains", "waves", "want"),
                         [(16, 128, 2.0, 17), (32, 16, 2.0, 9), (128, 16, 2.0, 3), (128, 16, 1.0, 2),
                          (8, 4, 2.0, 4), (256, 8, 1.0, 0), (16, 1, 2.0, 0), (16, 128, 0.0, 0)])
def test_tail_chains_fill_the_last_waves(kv_blocks: int, chains: int, waves: float, want: int) -> None:
    """The fewest chains whose blocks fill `waves` waves of 132 SMs, at most all; under 2 chains no tail."""
    assert order.tail_chains(kv_blocks, chains, 132, waves) == want


def test_tail_chains_refuse_empty_grids() -> None:
    with pytest.raises(ValueError, match="blocks, chains and sms must be positive, got 0, 4, 132"):
        order.tail_chains(0, 4, 132, 2.0)


@pytest.mark.parametrize(("grid", "tail"), [((5, 3, 2), 4), ((8, 4, 1), 4), ((3, 2, 3), 2), ((4, 2, 2), 0)])
def test_tail_slots_are_a_permutation_that_deals_the_tail_heaviest_first(grid: tuple[int, int, int],
                                                                         tail: int) -> None:
    """Every (KV block, KV head, entry) once; blocks before the tail keep their place; in the tail's dispatch order
    (blockIdx x fastest, then y, then z) the KV blocks never go back to a heavier one, each KV block index visiting
    every tail chain once."""
    gx, gy, gz = grid
    linear = [(x, y, z) for z, y, x in itertools.product(range(gz), range(gy), range(gx))]
    slots = [order.tail_slot(b, grid, tail) for b in linear]
    assert sorted(slots) == sorted(linear)
    chains = gy * gz
    start = (chains - tail) * gx if tail >= 2 else len(linear)
    assert slots[:start] == linear[:start]
    tail_slots = slots[start:]
    assert [n for n, _, _ in tail_slots] == sorted(n for n, _, _ in tail_slots)
    for n, group in itertools.groupby(tail_slots, key=lambda s: s[0]):
        assert len({(y, z) for _, y, z in group}) == tail, n


@pytest.mark.parametrize(("extra", "serves"),
                         [({"mask": "causal"}, True), ({"mask": "none"}, False),
                          ({"mask": "sliding_window", "window": (256, 0)}, False),
                          ({"mask": "causal", "deterministic": True}, False),
                          ({"mask": "causal", "seqlens": "varlen"}, False)])
def test_the_tail_order_serves_dense_causal_specs_with_dq_in_any_order(extra: dict[str, object], serves: bool) -> None:
    """A causal mask's blocks lighten with their index; a window's do not; an ordered dQ admits blocks by dispatch
    rank; a packed grid already orders its entries longest first."""
    for head_dim in (64, 128, 192, 256):
        spec = AttentionSpec(head_dim=head_dim, dtype="bf16", **extra)  # type: ignore[arg-type]
        plan = plan_bwd(spec, Arch.sm90)
        assert isinstance(plan, HopperBwdPlan)
        assert order.tail_order_serves(spec, plan.dkdv_wgmma) is serves
        assert plan.tail_waves == (order.BWD_TAIL_WAVES if serves else 0.0)
        assert ("heaviest block first" in order.order_line(plan)) is serves


def test_the_tail_waves_are_the_module_constant_at_plan_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """TAIL_WAVES is read when a plan is made (the device A/B overrides it); 0 turns the order off."""
    spec = AttentionSpec(name="tail_off", head_dim=128, dtype="bf16", mask="causal")
    monkeypatch.setattr(order, "BWD_TAIL_WAVES", 0.0)
    plan = plan_bwd(spec, Arch.sm90)
    assert isinstance(plan, HopperBwdPlan) and plan.tail_waves == 0.0
    assert order.order_line(plan).endswith("(the grid's own)")


@pytest.mark.parametrize(("extra", "serves"),
                         [({"mask": "causal"}, True), ({"mask": "none"}, False),
                          ({"mask": "sliding_window", "window": (256, 0)}, False),
                          ({"mask": "causal", "seqlens": "varlen"}, False)])
def test_the_hopper_forward_takes_the_tail_order_under_a_causal_mask(extra: dict[str, object], serves: bool) -> None:
    """The sm90 forward's plan carries FWD_TAIL_WAVES for dense causal specs (0 elsewhere), and explain says which
    order its blocks take."""
    from attngen.planning.planner import plan as plan_forward

    for head_dim in (64, 128, 256):
        spec = AttentionSpec(head_dim=head_dim, dtype="bf16", **extra)  # type: ignore[arg-type]
        plan = plan_forward(spec, Arch.sm90)
        assert plan.family == "sm90_fwd"
        assert plan.tail_waves == (order.FWD_TAIL_WAVES if serves else 0.0)
        assert ("heaviest block first across" in order.fwd_order_line(plan.tail_waves)) is serves


def test_the_forward_tail_holds_the_chains_whose_keys_fit_its_l2_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """K and V of 16 MB a chain (hd256 16k bf16): two fit 40 MB; 8 MB (8k): five; 0 turns the cap off; the cap
    bounds the waves' count, and a cap of 1 leaves the grid's order."""
    assert order.fwd_tail_cap(16384, 256, 2) == 2 and order.fwd_tail_cap(8192, 256, 2) == 5
    assert order.tail_chains(128, 8, 132, 2.0, most=2) == 2 and order.tail_chains(64, 16, 132, 2.0, most=5) == 5
    assert order.tail_chains(128, 8, 132, 2.0, most=1) == 0 and order.tail_chains(128, 8, 132, 2.0) == 3
    monkeypatch.setattr(order, "FWD_TAIL_L2_BYTES", 0)
    assert order.fwd_tail_cap(16384, 256, 2) == 0
