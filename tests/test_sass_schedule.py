"""benchmarks/sass_schedule.py: the control codes it decodes, the loop and path it picks. No GPU needed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
schedule = importlib.import_module("sass_schedule")

#: A hand-made listing in cuobjdump's layout: a loop (0x10-0x50) with a guarded exit to a retry stub (0x80) and a
#: branch around a block of two MUFUs (0x30-0x40), closed by a guarded backward branch; the stub jumps back unguarded.
#: The upper words carry only the stall (bits 41-44 of the upper word).
_LISTING = [
    (0x00, "MOV R1, R2", 1),
    (0x10, "@!P0 BRA 0x80", 1),
    (0x20, "@P1 BRA 0x50", 4),
    (0x30, "MUFU.EX2 R3, R3", 8),
    (0x40, "MUFU.EX2 R4, R4", 4),
    (0x50, "@P2 BRA 0x10", 1),
    (0x60, "EXIT", 1),
    (0x80, "BRA 0x10", 1),
]


def _sass() -> str:
    lines = ["\t\tFunction : kernel_main", "\t.headerflags @\"EF_CUDA_SM90\""]
    for addr, text, stall in _LISTING:
        lines.append(f"        /*{addr:04x}*/                   {text} ;   /* 0x0000000000000000 */")
        lines.append(f"                                                   /* 0x{(stall << 41):016x} */")
    return "\n".join(lines) + "\n"


def test_control_codes_and_the_loop() -> None:
    ins = schedule.instructions(_sass(), "_main")
    assert [x.stall for x in ins] == [stall for _, _, stall in _LISTING]
    assert ins[3].opcode == "MUFU.EX2" and ins[2].guarded and not ins[-1].guarded
    loop = schedule.main_loop(ins)  # the guarded branch at 0x50, not the stub's unguarded one at 0x80
    assert [x.addr for x in loop] == [0x10, 0x20, 0x30, 0x40, 0x50]


def test_the_common_path_issues_the_step_exps_at_the_fewest_stalls() -> None:
    loop = schedule.main_loop(schedule.instructions(_sass(), "_main"))
    with_exps = schedule.common_path(loop, 2)  # must go through both MUFUs
    assert (with_exps.instructions, with_exps.stalls, with_exps.mufu) == (5, 1 + 4 + 8 + 4 + 1, 2)
    assert with_exps.mufu_waits == (4 - 1) + (8 - 1)
    skipped = schedule.common_path(loop, 0)  # the branch around them is cheaper
    assert (skipped.instructions, skipped.mufu) == (3, 0)
    assert schedule.common_path(loop).mufu == 2  # None: the most any path issues
    with pytest.raises(ValueError, match="3 MUFUs"):
        schedule.common_path(loop, 3)


def test_a_real_backward_step() -> None:
    """hd128's dK/dV kernel: the common path issues the step's 32 exps a thread (64 queries x 64 KV rows / 128
    threads) and its wgmmas, with at least a cycle per instruction."""
    from attngen.spec.model import AttentionSpec

    p = schedule.step_schedule(AttentionSpec(name="sched_test", head_dim=128, dtype="bf16", mask="causal"))
    assert p.mufu == 32
    assert p.stalls >= p.instructions > 200
