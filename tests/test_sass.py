"""The compiled kernels use the instructions their design names, and no local memory."""

from __future__ import annotations

import importlib

import pytest

from attngen.spec.model import AttentionSpec
from attngen.toolchain.sass import disassemble, opcodes

build = importlib.import_module("attngen.toolchain.builder")


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_forward_runs_on_mma_ldmatrix_and_cp_async(arch: str, head_dim: int) -> None:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal", pipeline="multistage")
    ops = opcodes(disassemble(build.build(spec, arch).data))
    assert ops["HMMA"] > 0, "mma.sync must lower to HMMA"
    assert ops["LDSM"] > 0, "ldmatrix must lower to LDSM"
    assert ops["LDGSTS"] > 0, "cp.async must lower to LDGSTS"
    assert ops["MUFU"] > 0, "exp2 must lower to MUFU.EX2"
    assert ops["LDL"] == ops["STL"] == 0, "no local memory (spills or indexed register arrays)"


@pytest.mark.parametrize("pipeline", ["pingpong", "warp_specialized"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_hopper_forward_runs_on_wgmma_and_tma(pipeline: str, head_dim: int) -> None:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal", pipeline=pipeline)
    cubin = build.build(spec, "sm90")
    assert all(r.spill_stores == r.spill_loads == 0 for r in cubin.resources)
    manifest = build.manifest(cubin)
    assert manifest["plan"]["pipeline"] == pipeline
    assert manifest["plan"]["roles"]["pingpong"] == (pipeline == "pingpong")
    ops = opcodes(disassemble(cubin.data))
    assert ops["HGMMA"] > 0, "wgmma must lower to HGMMA"
    assert ops["UTMALDG"] > 0, "TMA loads must lower to UTMALDG"
    assert ops["SYNCS"] > 0, "mbarrier waits and arrivals must lower to SYNCS"
    assert ops["MUFU"] > 0
    assert ops["HMMA"] == ops["LDGSTS"] == 0, "no mma.sync or cp.async in the Hopper kernel"
    assert ops["LDL"] == ops["STL"] == 0, "no local memory"


def test_hopper_backward_runs_on_hgmma_and_tma() -> None:
    cubin = build.build_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), "sm90")
    assert cubin.source.plan.family == "sm90_bwd"
    assert all(r.spill_stores == r.spill_loads == 0 for r in cubin.resources)
    ops = opcodes(disassemble(cubin.data))
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["LDL"] == ops["STL"] == 0


def test_backward_kernels_run_on_mma_without_local_memory() -> None:
    # deterministic at hd256 on sm80: the atomic-free mma.sync kernels
    cubin = build.build_bwd(AttentionSpec(head_dim=256, dtype="fp16", mask="causal", deterministic=True), "sm80")
    assert cubin.source.plan.family == "sm80_bwd"
    ops = opcodes(disassemble(cubin.data))
    assert ops["HMMA"] > 0 and ops["LDSM"] > 0 and ops["LDGSTS"] > 0
    assert ops["LDL"] == ops["STL"] == 0


def test_opcode_parser() -> None:
    listing = """
        /*0090*/                   HMMA.16816.F32.BF16 R212, R224, R12.reuse, RZ ;   /* 0x0000000ce0d4723c */
        /*00a0*/               @!P0 LDGSTS.E.BYPASS.128 [R155+0x8000], desc[UR14][R12.64] ;   /* 0x0 */
        /*00b0*/                   LDSM.16.M88.4 R224, [R8+UR5] ;                   /* 0x0 */
    """
    assert opcodes(listing) == {"HMMA": 1, "LDGSTS": 1, "LDSM": 1}
