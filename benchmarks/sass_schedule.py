"""The static schedule of a kernel's main loop, from its SASS control codes (no GPU): for the sm90 dK/dV kernel (or,
with --forward, the forward kernel), what one step issues on its common path and the fixed stalls ptxas put between
the instructions; with --fa4, FlashAttention-4's kernel beside it (its cubins from benchmarks/fa4_cubins.py).

Each sm_90 instruction's upper word carries its control code: the cycles to stall before the next instruction may
issue (4 bits), a yield bit, the scoreboards it sets and waits on. The sum of the stalls along a path is its issue
time without any variable-latency wait (shared loads, wgmma, barriers); the stalls in front of MUFU.EX2 are the
fixed-latency waits Nsight Compute counts as `wait` on the exps (NOTES: ncu_peer_hd64_2k).

The loop is the kernel's longest guarded backward branch (an unguarded one is a retry's way back). Its paths run
from the loop's head to that branch; branches that leave the loop for an out-of-line retry (an mbarrier try_wait's)
are taken as not taken. The common path is the path
of fewest stall cycles among those that issue every exp of a step (a masked step's zeroing makes its path longer;
FA4's: among those that issue the most, as its Hopper kernels rescale unconditionally).

    python3 benchmarks/sass_schedule.py --head-dims 64,128 [--masks none] [--kinds "attngen,attngen:MOD.CONST=value"]
        [--forward] [--fa4 /tmp/fa4-cubins]
    bash benchmarks/nvrtc_device_check.sh python3 benchmarks/sass_schedule.py ...   (the device's NVRTC 13.0)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

_LOW = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
_HIGH = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/\s*$")
_TARGET = re.compile(r"\bBRA(?:\.[A-Z]+)*\s+(?:!?U?P\w+,\s*)?(?:`\()?(0x[0-9a-f]+)")
_GUARD = re.compile(r"^@!?U?P\w+\s+")


@dataclass(frozen=True)
class Instruction:
    addr: int
    text: str
    stall: int  # cycles before the next instruction may issue
    yield_: bool
    wait_mask: int  # scoreboards waited on

    @property
    def opcode(self) -> str:
        return _GUARD.sub("", self.text).split()[0]

    @property
    def guarded(self) -> bool:
        return bool(_GUARD.match(self.text))


def instructions(sass: str, entry_suffix: str) -> list[Instruction]:
    """The instructions of the kernel whose name ends with `entry_suffix`, with their control codes."""
    out: list[Instruction] = []
    inside, low = False, None
    for line in sass.splitlines():
        if "Function :" in line:
            inside = line.strip().endswith(entry_suffix)
            continue
        if not inside:
            continue
        if m := _LOW.match(line):
            low = (int(m.group(1), 16), m.group(2))
        elif (m := _HIGH.match(line)) and low is not None:
            ctrl = (int(m.group(1), 16) >> 41) & 0x7FFFFF
            out.append(Instruction(low[0], low[1], ctrl & 0xF, bool(ctrl >> 4 & 1), ctrl >> 11 & 0x3F))
            low = None
    return out


def _target(x: Instruction) -> int | None:
    """The address a branch goes to; None for any other instruction."""
    m = _TARGET.search(x.text) if x.opcode.startswith("BRA") else None
    return int(m.group(1), 16) if m else None


def main_loop(ins: list[Instruction]) -> list[Instruction]:
    """The instructions from the head of the longest guarded backward branch's loop to that branch (an unguarded one
    is an out-of-line retry's way back)."""
    index = {x.addr: i for i, x in enumerate(ins)}
    spans = []
    for i, x in enumerate(ins):
        target = _target(x) if x.guarded else None
        if target is not None and target < x.addr and target in index:
            spans.append((i - index[target], index[target], i))
    if not spans:
        raise ValueError("no backward branch: no loop")
    _, head, tail = max(spans)
    return ins[head:tail + 1]


@dataclass(frozen=True)
class StepPath:
    instructions: int
    stalls: int
    mufu: int
    mufu_waits: int  # stall cycles in front of MUFUs (beyond the one-cycle issue)
    by_opcode: tuple[tuple[str, int], ...]  # stall cycles after each opcode family, most first


def _blocks(loop: list[Instruction]) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """Basic blocks [start, end) of the loop and each block's successors inside it (by block index; the loop's last
    block, which ends with the backward branch, has none)."""
    index = {x.addr: i for i, x in enumerate(loop)}
    leaders = {0}
    for i, x in enumerate(loop[:-1]):
        if x.opcode.startswith(("BRA", "EXIT")):
            leaders.add(i + 1)
            if (target := _target(x)) in index:
                leaders.add(index[target])
    starts = sorted(leaders)
    blocks = list(zip(starts, starts[1:] + [len(loop)], strict=True))
    of = {s: b for b, (s, _) in enumerate(blocks)}
    succ: dict[int, list[int]] = {len(blocks) - 1: []}
    for b, (_, end) in enumerate(blocks[:-1]):
        last = loop[end - 1]
        target = _target(last)
        nxt = [of[index[target]]] if target in index and index[target] > end - 1 else []
        conditional = last.guarded or last.opcode.startswith("BRA.DIV")  # BRA.DIV: taken only if the warp diverged
        if conditional or not last.opcode.startswith(("BRA", "EXIT")):
            nxt.append(b + 1)  # falls through (a conditional branch out of the loop: a retry, taken as not taken)
        succ[b] = nxt
    return blocks, succ


def common_path(loop: list[Instruction], mufu_per_step: int | None = None) -> StepPath:
    """The path of fewest stall cycles from the loop's head to its backward branch that issues `mufu_per_step` MUFUs
    (None: as many as any path issues)."""
    blocks, succ = _blocks(loop)
    best: dict[tuple[int, int], tuple[int, list[int]]] = {(0, 0): (0, [])}
    found: list[tuple[int, int, list[int]]] = []  # (stall cycles, MUFUs, blocks) of each path to the backward branch
    for b, (start, end) in enumerate(blocks):  # forward edges only: blocks in address order are topologically ordered
        cost = sum(x.stall for x in loop[start:end])
        mufu = sum(x.opcode.startswith("MUFU") for x in loop[start:end])
        for (_, m), (c, path) in [item for item in best.items() if item[0][0] == b]:
            total, count = c + cost, m + mufu
            if b == len(blocks) - 1:
                found.append((total, count, [*path, b]))
            for n in succ[b]:
                key = (n, count)
                if key not in best or best[key][0] > total:
                    best[key] = (total, [*path, b])
    want = max((f[1] for f in found), default=0) if mufu_per_step is None else mufu_per_step
    candidates = [f for f in found if f[1] >= want]
    if not candidates:
        raise ValueError(f"no path of the loop issues {mufu_per_step} MUFUs")
    _, _, path = min(candidates, key=lambda f: f[0])
    seq = [x for b in path for x in loop[blocks[b][0]:blocks[b][1]]]
    by_op: Counter[str] = Counter()
    for x in seq:
        by_op[x.opcode.split(".")[0]] += x.stall
    waits = sum(seq[i - 1].stall - 1 for i in range(1, len(seq)) if seq[i].opcode.startswith("MUFU"))
    return StepPath(len(seq), sum(x.stall for x in seq), sum(x.opcode.startswith("MUFU") for x in seq), waits,
                    tuple(by_op.most_common(6)))


def step_schedule(spec: object, kind: str = "attngen", forward: bool = False) -> StepPath:
    """The common path of `spec`'s sm90 dK/dV kernel's query step (forward: the forward kernel's KV step, rescale
    skipped), built under `kind`'s constants."""
    from bwd_interleaved import overrides

    from attngen.planning.planner import plan
    from attngen.planning.planner_bwd import plan_bwd
    from attngen.toolchain.builder import build, build_bwd
    from attngen.toolchain.sass import disassemble

    with overrides(kind):
        if forward:
            cubin = build(spec, "sm90")  # type: ignore[arg-type]
            exps = plan(spec, "sm90").tiling.block_n // 2  # type: ignore[arg-type]  # 64 rows a warpgroup
        else:
            t = plan_bwd(spec, "sm90").dkdv_wgmma  # type: ignore[arg-type]
            cubin = build_bwd(spec, "sm90")  # type: ignore[arg-type]
            exps = t.block_m * (t.block_n // t.consumer_wgs) // 128  # per thread per step
    entry = cubin.source.entry_names[0] if forward else "_dkdv_wgmma"
    return common_path(main_loop(instructions(disassemble(cubin.data), entry)), exps)


def fa4_schedule(folder: Path, forward: bool) -> StepPath | None:
    """The common path of FlashAttention-4's main kernel among the cubins of `folder` (benchmarks/fa4_cubins.py), the
    path issuing the most exps (its Hopper kernels rescale O unconditionally); None where the folder has none."""
    from attngen.toolchain.sass import disassemble

    kind = "FlashAttentionForwardSm90" if forward else "FlashAttentionBackwardSm90"
    cubins = [c for c in sorted(folder.glob("*.cubin")) if kind in c.name]
    if not cubins:
        return None
    sass = disassemble(cubins[0].read_bytes())
    name = re.search(r"Function : (\S+)", sass)
    assert name is not None
    return common_path(main_loop(instructions(sass, name.group(1))))


def _line(label: str, p: StepPath) -> str:
    ops = ", ".join(f"{o} {c}" for o, c in p.by_opcode)
    return (f"{label}: {p.instructions} instructions, {p.stalls} stall cycles, {p.mufu} MUFU with {p.mufu_waits} "
            f"cycles of waits in front; stalls after {ops}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--kinds", default="attngen", help="as bwd_interleaved.py's attngen kinds, comma separated")
    ap.add_argument("--forward", action="store_true", help="the forward kernel's KV step instead")
    ap.add_argument("--fa4", type=Path, help="FlashAttention-4's cubins (benchmarks/fa4_cubins.py --out) beside")
    args = ap.parse_args()
    import os
    import tempfile

    os.environ.setdefault("ATTNGEN_CACHE_DIR", tempfile.mkdtemp(prefix="sass-schedule-"))
    from attngen.spec.model import AttentionSpec
    from attngen.toolchain.compiler import nvrtc_version

    what = "KV step of the forward kernel" if args.forward else "query step of the dK/dV kernel"
    print(f"NVRTC {nvrtc_version()}; the common path of one {what} (one consumer thread)")
    for d in map(int, args.head_dims.split(",")):
        for mask in args.masks.split(","):
            for i, kind in enumerate(args.kinds.split(",")):
                spec = AttentionSpec(name=f"sched{i}_{mask}{d}", head_dim=d, dtype="bf16", mask=mask)
                print(_line(f"hd{d} {mask:6s} {kind}", step_schedule(spec, kind, args.forward)))
            if args.fa4:
                folder = args.fa4 / f"{'fwd' if args.forward else 'bwd'}_hd{d}_{mask}"
                p = fa4_schedule(folder, args.forward)
                print(_line(f"hd{d} {mask:6s} fa4", p) if p else f"hd{d} {mask:6s} fa4: no cubin in {folder}")


if __name__ == "__main__":
    main()
