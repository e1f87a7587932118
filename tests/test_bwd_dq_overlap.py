"""dq_convert under the Hopper dK/dV kernel's last wave (HopperBwdTiling.dq_overlap, sm90_bwd_rows.DQ_OVERLAP): which
plans take it, what the three kernels do for it (SASS), and how the ready backward launches them. No GPU needed; the
GPU tier's backward and varlen tests (an entry without keys among them) run it by default."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from attngen.families import sm90_bwd, sm90_bwd_rows
from attngen.planning.planner_bwd import backward_family, plan_bwd
from attngen.spec.model import Arch, AttentionSpec
from attngen.toolchain import builder as build
from attngen.toolchain.sass import disassemble, kernel_opcodes

WAIT, TRIGGER = "ACQBULK", "PREEXIT"   # griddepcontrol.wait, griddepcontrol.launch_dependents


def _spec(head_dim: int = 128, mask: str = "causal", **kw: Any) -> AttentionSpec:
    return AttentionSpec(name=f"overlap_{mask}_{head_dim}", head_dim=head_dim, dtype="bf16", mask=mask, **kw)


@pytest.mark.parametrize(("head_dim", "mask"), [(64, "none"), (64, "causal"), (128, "none"), (128, "causal")])
def test_staged_bulk_plans_overlap_dq_convert(head_dim: int, mask: str) -> None:
    plan = plan_bwd(_spec(head_dim, mask), Arch.sm90)
    assert plan.dkdv_wgmma.dq_bulk and plan.dkdv_wgmma.dq_overlap
    assert "converted under the last wave" in sm90_bwd.Sm90Backward().plan_line(plan)


@pytest.mark.parametrize(("spec", "why"), [
    (_spec(deterministic=True), "an ordered dQ has no dq_convert"),
    (_spec(192), "the KV-row halves add dQ from the consumers' registers too"),
    (_spec(256), "the head-dim split adds dQ from registers"),
])
def test_plans_whose_dq_is_not_producer_warp_1s_do_not_overlap(spec: AttentionSpec, why: str) -> None:
    assert not plan_bwd(spec, Arch.sm90).dkdv_wgmma.dq_overlap, why


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sm90_bwd_rows, "DQ_OVERLAP", False)
    plan = plan_bwd(_spec(), Arch.sm90)
    assert plan.dkdv_wgmma.dq_bulk and not plan.dkdv_wgmma.dq_overlap
    assert "last wave" not in sm90_bwd.Sm90Backward().plan_line(plan)


def _opcodes(spec: AttentionSpec) -> dict[str, list[str]]:
    cubin = build.build_bwd(spec, "sm90")
    assert not any(r.spill_stores or r.wgmma_serialized for r in cubin.resources)
    return {name.split("_multistage_")[-1]: ops for name, ops in kernel_opcodes(disassemble(cubin.data)).items()}


def test_the_dkdv_blocks_release_and_count_and_dq_convert_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the overlap the dK/dV kernel releases its dependents (PREEXIT) and adds one more global reduction (its
    block's count) than without; dq_convert polls its counter with a pause (NANOSLEEP) before its loads and waits
    for the whole grid (ACQBULK) only after its stores, so that it never completes before the grid it overlaps."""
    on = _opcodes(_spec())
    monkeypatch.setattr(sm90_bwd_rows, "DQ_OVERLAP", False)
    off = _opcodes(_spec())
    assert TRIGGER in on["dkdv_wgmma"] and TRIGGER not in off["dkdv_wgmma"]
    assert on["dkdv_wgmma"].count("REDG") == off["dkdv_wgmma"].count("REDG") + 1
    convert = on["dq_convert"]
    assert convert.index("NANOSLEEP") < max(i for i, op in enumerate(convert) if op == "LDG")
    assert min(i for i, op in enumerate(convert) if op == WAIT) > max(i for i, op in enumerate(convert) if op == "STG")
    assert "NANOSLEEP" not in off["dq_convert"] and WAIT not in off["dq_convert"]


def test_the_preprocess_zeroes_the_counters_of_each_group() -> None:
    from attngen.codegen.renderer import render

    source = render(plan_bwd(_spec(), Arch.sm90)).code
    assert "constexpr bool kZeroDkdvDone = true;" in source
    assert "p.dkdv_done[batch * p.kv_heads + head / group] = 0;" in source


def test_the_ready_backward_launches_dq_convert_as_a_dependent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only dq_convert is a programmatic dependent, and the call's buffers hold one counter per (entry, KV head)."""
    torch = pytest.importorskip("torch")
    from attngen.features.variant import variant_of
    from attngen.runtime import backward as rt
    from attngen.runtime import tma
    from attngen.runtime.driver import LoadedFunction, PreparedLaunch
    from attngen.runtime.seqlens import Seqlens
    from attngen.runtime.variant_args import KernelVariant, prepare

    seen: list[tuple[str, bool, int]] = []

    def record(self: PreparedLaunch, stream: int, params: ctypes.Structure) -> None:
        seen.append((self.fn.name.rsplit("_multistage_", 1)[-1], self.dependent, params.dkdv_done))

    monkeypatch.setattr(PreparedLaunch, "__call__", record)
    monkeypatch.setattr(tma, "tensor_map", lambda key: bytes(128))
    made: list[rt.Buffers] = []
    real = rt.buffers
    monkeypatch.setattr(rt, "buffers", lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    spec = _spec()
    plan = plan_bwd(spec, Arch.sm90)
    assert not plan.dependent_launch

    def t(heads: int) -> Any:
        return torch.randn(2, 192, heads, 128).to(torch.bfloat16)

    q, k, v = t(4), t(2), t(2)
    call = rt.BwdCall(dout=t(4), q=q, k=k, v=v, out=t(4), lse=torch.randn(2, 4, 192), dlse=None, softmax_scale=0.1,
                      args=prepare(KernelVariant.of(variant_of(spec)), q, [], [], 2), seqs=Seqlens.dense(q, k))
    ready = backward_family(plan.family).prepare(plan, lambda e, s=0: LoadedFunction(e, None, 4096, s), call)
    ready.run(call, stream=7)
    done = made[-1].dkdv_done
    assert done is not None and tuple(done.shape) == (2, 2) and done.dtype == torch.int32
    assert [(name, dependent) for name, dependent, _ in seen] == [
        ("preprocess", False), ("dkdv_wgmma", False), ("dq_convert", True)]
    assert {counters for _, _, counters in seen} == {done.data_ptr()}


def test_with_dependent_launches_the_blocks_release_dq_convert_after_waiting_for_the_preprocess(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both switches: the dK/dV kernel itself starts under the preprocess, which zeroes the counters dq_convert polls,
    so no block releases dq_convert (PREEXIT) before its wait for the preprocess (ACQBULK)."""
    monkeypatch.setattr(sm90_bwd, "DEPENDENT_LAUNCH", True)
    dkdv = _opcodes(_spec())["dkdv_wgmma"]
    assert TRIGGER in dkdv and dkdv.index(WAIT) < dkdv.index(TRIGGER)
