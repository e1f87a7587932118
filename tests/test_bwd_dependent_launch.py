"""The Hopper backward's programmatic dependent launches (HopperBwdPlan.dependent_launch, sm90_bwd.DEPENDENT_LAUNCH):
which launches are dependents, and where the kernels wait. No GPU needed: plans, prepared launches and the SASS."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from attngen.families import sm90_bwd, sm90_bwd_rows
from attngen.planning.planner_bwd import backward_family, plan_bwd
from attngen.spec.model import Arch, AttentionSpec
from attngen.toolchain import builder as build
from attngen.toolchain.sass import disassemble, kernel_opcodes

SPEC = AttentionSpec(name="dep", head_dim=128, dtype="bf16", mask="causal")
WAIT, TRIGGER = "ACQBULK", "PREEXIT"   # griddepcontrol.wait, griddepcontrol.launch_dependents


def _kernels(spec: AttentionSpec) -> dict[str, list[str]]:
    cubin = build.build_bwd(spec, "sm90")
    assert not any(r.spill_stores or r.wgmma_serialized for r in cubin.resources)
    return {name.split("_multistage_")[-1]: ops for name, ops in kernel_opcodes(disassemble(cubin.data)).items()}


def test_each_kernel_waits_and_the_producer_waits_after_its_first_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preprocess waits before its loads and lets the dK/dV kernel start; the dK/dV kernel's producer issues K, V
    and the first Q and dO tiles (UTMALDG), then waits, then copies the row values (UBLKCP: the preprocess's D and
    LSE); dq_convert waits before it reads. With the switch off no kernel has either instruction. (dq_convert's own
    overlap, which waits per (entry, KV head) instead, is off here: test_bwd_dq_overlap.py.)"""
    monkeypatch.setattr(sm90_bwd_rows, "DQ_OVERLAP", False)
    monkeypatch.setattr(sm90_bwd, "DEPENDENT_LAUNCH", True)
    kernels = _kernels(SPEC)
    assert set(kernels) == {"preprocess", "dkdv_wgmma", "dq_convert"}
    pre, dkdv, convert = kernels["preprocess"], kernels["dkdv_wgmma"], kernels["dq_convert"]
    assert pre.index(WAIT) < pre.index(TRIGGER) < min(i for i, op in enumerate(pre) if op.startswith("LDG"))
    assert TRIGGER in dkdv and convert.index(WAIT) < convert.index("LDG")
    producer_wait = max(i for i, op in enumerate(dkdv) if op == WAIT)
    loads = [i for i, op in enumerate(dkdv) if op == "UTMALDG"]
    rows = [i for i, op in enumerate(dkdv) if op == "UBLKCP"]
    assert rows and min(rows) > producer_wait
    assert sum(i < producer_wait for i in loads) >= 4   # K and V (two 64-column boxes each at hd128) at least
    monkeypatch.setattr(sm90_bwd, "DEPENDENT_LAUNCH", False)
    off = _kernels(SPEC)
    assert all(WAIT not in ops and TRIGGER not in ops for ops in off.values())


def test_the_plan_names_the_dependent_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plan_bwd(SPEC, Arch.sm90).dependent_launch is sm90_bwd.DEPENDENT_LAUNCH
    monkeypatch.setattr(sm90_bwd, "DEPENDENT_LAUNCH", True)
    plan = plan_bwd(SPEC, Arch.sm90)
    assert plan.dependent_launch
    assert sm90_bwd.Sm90Backward().plan_line(plan).endswith(", dependent launches")
    assert not plan_bwd(SPEC, Arch.sm80).model_dump().get("dependent_launch")   # the mma.sync family's launches
    monkeypatch.setattr(sm90_bwd, "DEPENDENT_LAUNCH", False)
    assert not plan_bwd(SPEC, Arch.sm90).dependent_launch


@pytest.mark.parametrize("dependent", [True, False])
def test_the_ready_backward_launches_its_three_kernels_as_the_plan_says(dependent: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from attngen.features.variant import variant_of
    from attngen.runtime import backward as rt
    from attngen.runtime import tma
    from attngen.runtime.driver import LoadedFunction, PreparedLaunch
    from attngen.runtime.seqlens import Seqlens
    from attngen.runtime.variant_args import KernelVariant, prepare

    seen: list[tuple[str, bool]] = []

    def record(self: PreparedLaunch, stream: int, params: ctypes.Structure) -> None:
        seen.append((self.fn.name.rsplit("_multistage_", 1)[-1], self.dependent))

    monkeypatch.setattr(PreparedLaunch, "__call__", record)
    monkeypatch.setattr(tma, "tensor_map", lambda key: bytes(128))
    monkeypatch.setattr(sm90_bwd, "DEPENDENT_LAUNCH", dependent)
    monkeypatch.setattr(sm90_bwd_rows, "DQ_OVERLAP", False)
    plan = plan_bwd(SPEC, Arch.sm90)

    def t() -> Any:
        return torch.randn(1, 192, 2, 128).to(torch.bfloat16)

    q = t()
    call = rt.BwdCall(dout=t(), q=q, k=t(), v=t(), out=t(), lse=torch.randn(1, 2, 192), dlse=None, softmax_scale=0.1,
                      args=prepare(KernelVariant.of(variant_of(SPEC)), q, [], [], 1), seqs=Seqlens.dense(q, q))
    ready = backward_family(plan.family).prepare(plan, lambda e, s=0: LoadedFunction(e, None, 4096, s), call)
    ready.run(call, stream=7)
    assert seen == [("preprocess", dependent), ("dkdv_wgmma", dependent), ("dq_convert", dependent)]
