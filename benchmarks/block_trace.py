"""Where the sm90 backward's dK/dV kernel spends its time, block by block (device machine): a copy of the templates
whose dK/dV kernel records, for each block, its start and end (%globaltimer), when its K and V landed, when its last
step was done, its SM and its query steps into a `__device__` array read back after the call. From those: the
kernel's span, each SM's busy and idle time (the tail and the gaps between blocks), a block's wait for K and V, its
loop and its epilogue, and a fit of a block's time against its steps (fixed cost + per-step cost) for causal and
unmasked calls, so the causal backward's loss can be placed: per step, per block, or in the schedule.

    python3 benchmarks/block_trace.py --patch /tmp/trace_tpl          (copies and patches templates/; CPU is fine)
    ATTNGEN_TEMPLATES=/tmp/trace_tpl python3 benchmarks/block_trace.py --seqlens 2048,8192,16384 --out DIR

Shapes as `attngen bench --backward` (batch 16384 / seqlen, 2048 / head_dim heads). The recording adds five global
stores a block; compare the traced span with the untraced kernel time the script also prints.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

TRACE_SLOTS = 6  # start, end (ns), SM, query steps, K/V landed, last step done (ns)
TRACE_BLOCKS = 1 << 16

_DECL = (f'extern "C" {{ __device__ unsigned long long attngen_trace[{TRACE_SLOTS * TRACE_BLOCKS}]; }}\n'
         "__device__ __forceinline__ unsigned long long trace_clock() {\n"
         "  unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
         "__device__ __forceinline__ unsigned trace_block() {\n"
         "  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }\n")
_START = ("  if (threadIdx.x == 128) ::attngen_trace[6 * ::trace_block()] = ::trace_clock();\n")
# In the consumers (hopper_bwd_rows.cuh.j2): when K and V have landed, and when the last step is done (before dK and dV
# are written).
_KV = ("  if (threadIdx.x == 128) ::attngen_trace[6 * ::trace_block() + 4] = ::trace_clock();\n")
_LOOP = ("  if (threadIdx.x == 128) ::attngen_trace[6 * ::trace_block() + 5] = ::trace_clock();\n")
_END = ("  if (threadIdx.x == 128) {\n"
        "    unsigned smid; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(smid));\n"
        "    const unsigned id = ::trace_block();\n"
        "    ::attngen_trace[6 * id + 1] = ::trace_clock();\n"
        "    ::attngen_trace[6 * id + 2] = smid;\n"
        "    ::attngen_trace[6 * id + 3] = walk.range.n_max - walk.range.n_min;\n"
        "  }\n")


def patch(dst: Path) -> None:
    """Copy templates/ to dst with the recording added to the 64-KV-row consumers' dK/dV kernel."""
    src = Path(__file__).resolve().parent.parent / "templates"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    top = dst / "attn_bwd_hopper.cu.j2"
    text = top.read_text()
    marker = "namespace attngen_hopper_bwd {"
    assert text.count(marker) == 1, "attn_bwd_hopper.cu.j2: the namespace to insert before"
    top.write_text(text.replace(marker, _DECL + marker))
    body = dst / "common" / "hopper_bwd.cuh.j2"
    text = body.read_text()
    entry = "  const u32 base = smem_addr(smem);\n"
    call = "  bwd_consume(p, base, smem, n_block, kv_head, batch, seq, walk);\n"
    assert text.count(entry) == 1 and text.count(call) == 1, "hopper_bwd.cuh.j2: the entry and the consumer call"
    text = text.replace(entry, entry + _START).replace(call, call + _END)
    body.write_text(text)
    rows = dst / "common" / "hopper_bwd_rows.cuh.j2"
    text = rows.read_text()
    kv, epilogue = "  mbar_wait(bar_kv(base), 0);\n", "  if constexpr (kDkvStaged) {\n"
    assert text.count(kv) == 1 and text.count(epilogue) == 1, "hopper_bwd_rows.cuh.j2: the K/V wait and the epilogue"
    rows.write_text(text.replace(kv, kv + _KV).replace(epilogue, _LOOP + epilogue))


def read_trace(fn: object, blocks: int):  # type: ignore[no-untyped-def]
    import numpy as np
    from cuda.bindings import driver

    err, ptr, size = driver.cuModuleGetGlobal(fn.module, b"attngen_trace")  # type: ignore[attr-defined]
    assert int(err) == 0, err
    host = np.zeros(size // 8, dtype=np.uint64)
    (err,) = driver.cuMemcpyDtoH(host.ctypes.data, ptr, size)
    assert int(err) == 0, err
    return host[: TRACE_SLOTS * blocks].reshape(blocks, TRACE_SLOTS).astype(np.int64)


def summarize(rows, grid: tuple[int, int, int]) -> dict:  # type: ignore[no-untyped-def]
    import numpy as np

    start, end, sm, steps, kv, loop = rows.T
    t0 = start.min()
    start, end, kv, loop = start - t0, end - t0, kv - t0, loop - t0
    span = int(end.max())
    dur = end - start
    a = np.vstack([np.ones_like(steps), steps]).T.astype(float)
    (fixed, per_step), *_ = np.linalg.lstsq(a, dur.astype(float), rcond=None)
    sms = np.unique(sm)
    last_end = np.array([end[sm == s].max() for s in sms])
    busy = np.array([dur[sm == s].sum() for s in sms])
    first_idle = int(last_end.min())
    return {
        "grid": grid, "blocks": int(len(rows)), "sms": int(len(sms)), "span_us": span / 1e3,
        "fit_fixed_us": float(fixed) / 1e3, "fit_per_step_us": float(per_step) / 1e3,
        "steps_total": int(steps.sum()), "steps_max": int(steps.max()),
        "busy_fraction": float(busy.sum() / (span * len(sms))),
        "tail_us_mean": float((span - last_end).mean()) / 1e3,
        "first_sm_done_us": first_idle / 1e3,
        "gap_us_mean": float((last_end - busy).mean()) / 1e3,
        "kv_wait_us_median": float(np.median(kv - start)) / 1e3,
        "epilogue_us_median": float(np.median(end - loop)) / 1e3,
        "loop_per_step_us_median": float(np.median((loop - kv) / np.maximum(steps, 1))) / 1e3,
        "fit_loop": [float(x) / 1e3 for x in np.linalg.lstsq(a, (loop - kv).astype(float), rcond=None)[0]],
        "step_us_by_decile": [float(np.median(dur[(steps >= lo) & (steps < hi)] / steps[(steps >= lo) & (steps < hi)]))
                              / 1e3 for lo, hi in _deciles(steps) if ((steps >= lo) & (steps < hi)).any()],
    }


def _deciles(steps):  # type: ignore[no-untyped-def]
    import numpy as np

    edges = np.unique(np.percentile(steps, np.linspace(0, 100, 6)).astype(int))
    edges[-1] += 1
    return list(zip(edges[:-1], edges[1:], strict=True))


def run(head_dim: int, seqlen: int, causal: bool, out: Path) -> None:
    import torch

    import attngen
    from attngen.bench.measure import kernel_times_us, make_inputs
    from attngen.bench.model import Config
    from attngen.families.sm90_bwd_rows import BLOCK_N
    from attngen.spec.model import AttentionSpec

    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none")
    kernel = attngen.compile(spec)
    cfg = Config(head_dim, seqlen, causal)
    q, k, v = (t.requires_grad_() for t in make_inputs(cfg, "bf16", 0))
    dout = torch.randn_like(q)
    o = kernel(q, k, v)

    def step() -> None:
        torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)

    times = kernel_times_us(step, 10)
    dkdv_us = sum(us for name, us in times.items() if "dkdv" in name)
    fn = next(f for (_, entry), f in kernel.backward._loaded.items() if entry.endswith("_dkdv_wgmma"))
    grid = ((seqlen + BLOCK_N - 1) // BLOCK_N, cfg.heads, cfg.batch)
    step()
    torch.cuda.synchronize()
    rows = read_trace(fn, grid[0] * grid[1] * grid[2])
    summary = summarize(rows, grid)
    summary.update(head_dim=head_dim, seqlen=seqlen, causal=causal, dkdv_kernel_us=dkdv_us)
    name = f"hd{head_dim}_s{seqlen}_{'causal' if causal else 'none'}"
    import numpy as np

    np.savetxt(out / f"{name}.csv.gz", rows, fmt="%d", delimiter=",", header="start_ns,end_ns,sm,steps,kv_ns,loop_ns")
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1))
    print(name, json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()
                            if k != "step_us_by_decile"}))
    print("   per-step us by step-count bins:", [round(x, 3) for x in summary["step_us_by_decile"]])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--patch", type=Path, help="copy and patch the templates into this folder, then exit")
    ap.add_argument("--head-dims", default="128")
    ap.add_argument("--seqlens", default="2048,8192,16384")
    ap.add_argument("--out", type=Path, default=Path("/tmp/block_trace"))
    args = ap.parse_args()
    if args.patch:
        patch(args.patch)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                run(d, s, causal, args.out)


if __name__ == "__main__":
    main()
