"""Lower an AttentionSpec to a KernelPlan for one arch.

The budget arithmetic lives here and nowhere else: `smem_layout` (bytes), `register_estimate`
(registers per thread) and `estimate_cost` (the cost model). Every candidate tiling is evaluated;
rejected ones keep the arithmetic that rejected them, and the choice names its reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from ..errors import PlanError
from ..spec.model import Arch, AttentionSpec, MaskKind, PipelineKind
from . import search_space
from .archs import ArchInfo, arch_info
from .ir import Candidate, CostEstimate, KernelPlan, SmemLayout, Tiling

#: Registers beside the O, S and Q tiles and the per-tile A fragments: pointers, loop counters,
#: softmax statistics, B fragments in flight, ldmatrix offsets. Calibrated with -Xptxas=-v (NVRTC
#: 13.5) on sm_90a over the whole search space at hd 64/128/256 (benchmarks/NOTES.md): every tiling
#: within 255 compiles without spills, and every tiling that spills is over 255 or over
#: MAX_COPIES_PER_THREAD. Other NVRTC releases differ a little: the build re-plans around spills.
REG_OVERHEAD = 16
#: cp.async copies one thread issues per K (or V) tile. Past 16, ptxas keeps too many addresses
#: live and spills (hd256, block_n 128, 4 warps: 344 B of spills at 255 registers; with 8 warps,
#: 16 copies each, none).
MAX_COPIES_PER_THREAD = 16
#: Blocks of this many warps issue the K/V refill after S = Q K^T. Measured on the H100 (A/B of the
#: same tiles, benchmarks/NOTES.md): 8-warp hd256 +4% (295 -> 307 TFLOP/s non-causal, 270 -> 279
#: causal); 4-warp hd128 unchanged non-causal and -2% causal, so 4-warp blocks refill first.
REFILL_LATE_WARPS = 8
#: The workload the cost model ranks candidates on (FlashAttention-3 paper settings, mid-size).
REF_SEQLEN = 4096
REF_HIDDEN = 2048
#: Resident warps per SM below which the cost model charges for exposed latency.
WARPS_TO_HIDE_LATENCY = 8
#: Fixed cost of one KV-block iteration (cp.async wait, barrier, loop and softmax bookkeeping),
#: in clocks; another resident block overlaps it. 512 makes the model rank hd256 block_n 64 over 32
#: as the H100 sweep measured (294 vs 270 TFLOP/s; benchmarks/NOTES.md).
ITER_OVERHEAD_CLK = 512
#: exp2 throughput of the special-function units: 16 per clock per SM on sm80 and later.
MUFU_PER_CLK = 16


def swizzle_chunks(head_dim: int) -> int:
    """16-byte chunks per swizzle row: 8 (128-byte rows) when the head dim is a multiple of 64, else 4."""
    return 8 if head_dim % 64 == 0 else 4


def smem_layout(spec: AttentionSpec, tiling: Tiling) -> SmemLayout:
    """Shared memory of one block: a resident Q tile, then `stages` K/V tile pairs."""
    elem = spec.dtype.itemsize
    q_bytes = tiling.block_m * spec.head_dim * elem
    k_bytes = tiling.block_n * spec.head_dim * elem
    v_bytes = k_bytes
    stage = k_bytes + v_bytes
    total = q_bytes + tiling.stages * stage
    return SmemLayout(q_offset=0, q_bytes=q_bytes, kv_offset=q_bytes, k_tile_bytes=k_bytes,
                      v_tile_bytes=v_bytes, stage_bytes=stage, total_bytes=total,
                      swizzle_chunks=swizzle_chunks(spec.head_dim))


def register_estimate(spec: AttentionSpec, tiling: Tiling, info: ArchInfo) -> int:
    """32-bit registers per thread: O and S accumulators, optional Q fragments, A fragments, overhead
    and the target's reserve."""
    rows = tiling.warp_m_tiles  # 16-row tiles; each thread holds 2 rows of each
    o_acc = rows * spec.head_dim // 2        # (16 x d) fp32 per tile / 32 lanes
    # (16 x block_n) fp32 per tile / 32 lanes, weighted 9/8: the packed P of a k-step lives beside
    # the scores (calibration: hd64 128 x 128 with 2 warp tiles spills 8 B at estimate 240, hd128
    # 128 x 64 with 2 warp tiles does not).
    s_acc = rows * tiling.block_n // 2 * 9 // 8
    q_frag = rows * spec.head_dim // 4 if tiling.q_in_regs else 0  # packed 2 x 16-bit per register
    a_frag = 16 * rows                        # A fragments of the current and the next k-step
    return o_acc + s_acc + q_frag + a_frag + REG_OVERHEAD + info.extra_registers


def copies_per_thread(spec: AttentionSpec, tiling: Tiling) -> int:
    """16-byte cp.async copies each thread issues for one K tile."""
    return -(-(tiling.block_n * spec.head_dim // 8) // (tiling.num_warps * 32))


def _blocks_per_sm(info: ArchInfo, tiling: Tiling, smem: int, regs: int) -> int:
    threads = tiling.num_warps * 32
    by_smem = info.smem_per_sm // (smem + info.smem_reserved_per_block)
    by_regs = info.regs_per_sm // (max(regs, 32) * threads)
    by_threads = info.max_threads_per_sm // threads
    return max(0, min(by_smem, by_regs, by_threads))


def estimate_cost(spec: AttentionSpec, info: ArchInfo, tiling: Tiling, smem: int, regs: int) -> CostEstimate:
    """Predicted time of one forward pass at the reference workload (batch x heads fill hidden 2048)."""
    n, d, elem = REF_SEQLEN, spec.head_dim, spec.dtype.itemsize
    heads = REF_HIDDEN // d
    causal = 0.5 if spec.mask is MaskKind.causal else 1.0
    m_blocks = -(-n // tiling.block_m)
    # IO model: Q and O once, K and V once per query block (half of them under a causal mask).
    hbm = heads * (2 * n * d * elem + causal * m_blocks * 2 * n * d * elem)
    flops = heads * 4 * n * n * d * causal
    # Each warp reads the whole K and V tile per KV block (and Q when it is not in registers).
    kv_blocks = m_blocks * -(-n // tiling.block_n) * causal
    per_block = tiling.num_warps * 2 * tiling.block_n * d * elem
    if not tiling.q_in_regs:
        per_block += tiling.block_m * d * elem
    smem_read = heads * kv_blocks * per_block
    blocks = _blocks_per_sm(info, tiling, smem, regs)
    warps = blocks * tiling.num_warps
    hiding = min(1.0, warps / WARPS_TO_HIDE_LATENCY)
    waves = -(-(m_blocks * heads) // max(1, blocks * info.num_sms_hint))
    tile_eff = (m_blocks * heads) / (waves * max(1, blocks * info.num_sms_hint))
    clk = info.clock_ghz * 1e3  # clocks per microsecond
    t_hbm = hbm / (info.hbm_gbps * 1e3)
    t_mma = flops / (info.mma_flops_per_clk * info.num_sms_hint * clk)
    t_smem = smem_read / (info.smem_bytes_per_clk * info.num_sms_hint * clk)
    t_exp = heads * n * n * causal / (MUFU_PER_CLK * info.num_sms_hint * clk)
    iters_per_sm = kv_blocks * heads / info.num_sms_hint
    t_iter = iters_per_sm * ITER_OVERHEAD_CLK / clk / max(1, blocks)
    predicted = max(t_hbm, t_mma + t_exp + 0.5 * t_smem + t_iter) / (hiding * tile_eff)
    return CostEstimate(ref_seqlen=n, hbm_bytes=int(hbm), smem_read_bytes=int(smem_read), flops=int(flops),
                        blocks_per_sm=blocks, warps_per_sm=warps, tile_efficiency=round(tile_eff, 4),
                        t_hbm_us=round(t_hbm, 2), t_mma_us=round(t_mma, 2), t_smem_us=round(t_smem, 2),
                        latency_hiding=round(hiding, 3), predicted_us=round(predicted, 2))


def enumerate_tilings(spec: AttentionSpec) -> list[Tiling]:
    """The multistage search space (search_space.MULTISTAGE) with the spec's stages, Q in registers or not."""
    space = search_space.MULTISTAGE
    stages = (spec.pipeline.stages,) if spec.pipeline.stages else space.auto_stages
    return [Tiling(block_m=b.block_m, block_n=bn, num_warps=b.num_warps, warp_m_tiles=b.warp_m_tiles, stages=st,
                   q_in_regs=q_regs, refill_late=b.num_warps >= REFILL_LATE_WARPS)
            for b, bn, st, q_regs in itertools.product(space.blocks, space.block_ns, stages, (True, False))]


def _override_mismatch(spec: AttentionSpec, tiling: Tiling) -> str | None:
    tiles = spec.tiles
    if tiles is None:
        return None
    for field in ("block_m", "block_n", "num_warps"):
        want = getattr(tiles, field)
        if want is not None and getattr(tiling, field) != want:
            return f"tiles.{field} is {want}"
    return None


def evaluate(spec: AttentionSpec, info: ArchInfo, tiling: Tiling) -> Candidate:
    layout = smem_layout(spec, tiling)
    smem, regs = layout.total_bytes, register_estimate(spec, tiling, info)
    dims = f"hd{spec.head_dim} {spec.dtype.value} block_m {tiling.block_m} block_n {tiling.block_n}"

    def reject(reason: str) -> Candidate:
        return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=False, reason=reason)

    if smem > info.smem_per_block:
        return reject(f"{dims}, {tiling.stages} stages needs {smem} B of shared memory "
                      f"({layout.q_bytes} Q + {tiling.stages} x {layout.stage_bytes} K/V); "
                      f"{info.arch.value} allows {info.smem_per_block} B per block")
    if regs > info.max_regs_per_thread:
        return reject(f"needs ~{regs} registers per thread (O {tiling.warp_m_tiles * spec.head_dim // 2}"
                      f" + S {tiling.warp_m_tiles * tiling.block_n // 2 * 9 // 8}"
                      f" + Q {tiling.warp_m_tiles * spec.head_dim // 4 if tiling.q_in_regs else 0}"
                      f" + A {16 * tiling.warp_m_tiles} + {REG_OVERHEAD} + {info.extra_registers} for "
                      f"{info.arch.value}); at most "
                      f"{info.max_regs_per_thread}: it would spill")
    copies = copies_per_thread(spec, tiling)
    if copies > MAX_COPIES_PER_THREAD:
        return reject(f"{copies} cp.async copies per thread per K tile ({tiling.block_n} x {spec.head_dim} "
                      f"over {tiling.num_warps * 32} threads); above {MAX_COPIES_PER_THREAD} ptxas spills addresses")
    cost = estimate_cost(spec, info, tiling, smem, regs)
    if cost.blocks_per_sm == 0:
        return reject("no block of this size can be resident on one SM")
    return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=True, reason="fits", cost=cost)


def _rank_key(spec: AttentionSpec, c: Candidate) -> tuple[int, float, int, int]:
    from . import planner_hopper

    assert c.cost is not None
    # Hopper: the measured tile table first. Then the lowest predicted time; ties go to fewer bytes of
    # shared memory, then fewer registers.
    measured = planner_hopper.measured_preference(spec, c.tiling) if c.tiling.consumer_warpgroups else 0
    return (measured, c.cost.predicted_us, c.smem_bytes, c.regs_estimate)


def kernel_name(spec: AttentionSpec, arch: Arch, pipeline: PipelineKind) -> str:
    mask = spec.mask.value
    if spec.mask is MaskKind.sliding_window and spec.window is not None:
        left, right = (("inf" if w < 0 else str(w)) for w in spec.window)
        mask = f"window_{left}_{right}"
    return f"attn_fwd_{mask}_hd{spec.head_dim}_{spec.dtype.value}_{arch.value}_{pipeline.value}"


#: `pipeline: auto` on an arch with wgmma picks a Hopper pipeline where the Hopper planner serves the
#: spec (1.3-2.3x multistage on the H100 at hd 64/128/256: benchmarks/NOTES.md): the measured one
#: for the head dim (planner_hopper.MEASURED_TILES), else ping-pong.
AUTO_PREFERS_HOPPER = True


def resolve_pipeline(spec: AttentionSpec, arch: Arch) -> PipelineKind:
    """The strategy a plan uses: the spec's, or for `auto` the best one `arch` offers for it."""
    from . import planner_hopper

    kind = spec.pipeline.kind
    if kind is PipelineKind.auto:
        return _resolve_auto(spec, arch)
    if kind.is_hopper:
        why_not = planner_hopper.supports(spec, arch)
        if why_not is not None:
            raise PlanError(f"spec '{spec.name}' asks for pipeline '{kind.value}', but {why_not}. Remedy: use "
                            f"pipeline 'auto' or 'multistage' for this spec or arch")
    return kind


def auto_pipelines(spec: AttentionSpec, arch: Arch) -> list[PipelineKind]:
    """The pipelines `auto` may use for `spec` on `arch`, preferred first: where the Hopper planner
    serves the spec, the measured one for the head dim, the other Hopper one, then multistage."""
    from . import planner_hopper

    if not AUTO_PREFERS_HOPPER or planner_hopper.supports(spec, arch) is not None:
        return [PipelineKind.multistage]
    first = planner_hopper.auto_pipeline(spec)
    other = PipelineKind.pingpong if first is PipelineKind.warp_specialized else PipelineKind.warp_specialized
    return [first, other, PipelineKind.multistage]


def _resolve_auto(spec: AttentionSpec, arch: Arch) -> PipelineKind:
    """With tile overrides, the first of `auto_pipelines` whose search space holds them and that fits
    them in the budget; else the first that holds them (its PlanError then gives the budget)."""
    kinds = auto_pipelines(spec, arch)
    tiles = _overrides(spec)
    if not tiles or len(kinds) == 1:
        return kinds[0]
    held = [k for k in kinds if search_space.SPACES[k.value].holds(tiles)]
    fits = (k for k in held if any(c.fits and _override_mismatch(spec, c.tiling) is None
                                   for c in _evaluate_all(spec, arch, k)))
    return next(fits, held[0] if held else kinds[0])


def _overrides(spec: AttentionSpec) -> dict[str, int]:
    """The spec's tile overrides that are set, e.g. {'block_m': 64}."""
    return spec.tiles.model_dump(exclude_none=True) if spec.tiles else {}


def _evaluate_one(spec: AttentionSpec, info: ArchInfo, kind: PipelineKind, tiling: Tiling) -> Candidate:
    from . import planner_hopper

    if kind.is_hopper:
        return planner_hopper.evaluate(spec, info, tiling, kind is PipelineKind.pingpong)
    return evaluate(spec, info, tiling)


def _evaluate_all(spec: AttentionSpec, arch: Arch, kind: PipelineKind) -> list[Candidate]:
    from . import planner_hopper

    info = arch_info(arch)
    tilings = (planner_hopper.enumerate_tilings(spec, kind is PipelineKind.pingpong) if kind.is_hopper
               else enumerate_tilings(spec))
    return [_evaluate_one(spec, info, kind, t) for t in tilings]


def plan(spec: AttentionSpec, arch: Arch | str, exclude: Mapping[Tiling, str] | None = None) -> KernelPlan:
    """The KernelPlan of `spec` on `arch`; PlanError when no tiling fits the budget.

    `exclude` maps tilings already found wanting (by the build's ptxas check) to the reason.
    """
    arch = Arch(arch)
    kind = resolve_pipeline(spec, arch)
    candidates: list[Candidate] = []
    for cand in _evaluate_all(spec, arch, kind):
        mismatch = _override_mismatch(spec, cand.tiling)
        if mismatch and cand.fits:
            cand = cand.model_copy(update={"fits": False, "reason": f"excluded by the spec: {mismatch}"})
        elif exclude and cand.tiling in exclude and cand.fits:
            cand = cand.model_copy(update={"fits": False, "reason": exclude[cand.tiling]})
        candidates.append(cand)
    fitting = sorted((c for c in candidates if c.fits), key=lambda c: _rank_key(spec, c))
    if not fitting:
        raise PlanError(_no_fit_message(spec, arch, kind, candidates))
    best = fitting[0]
    reason = _choice_reason(spec, kind, best, fitting)
    return _assemble(spec, arch, kind, best, reason, tuple(candidates))


def describe_tiling(t: Tiling) -> str:
    """A tiling as the reasons name it: the Hopper pipelines by consumer warpgroups, multistage by its block."""
    if t.consumer_warpgroups:
        return (f"{t.consumer_warpgroups} consumer warpgroups, block_n {t.block_n}, {t.stages} stages, "
                f"overlap {t.intra_wg_overlap}")
    return f"block_m {t.block_m}, block_n {t.block_n}, {t.num_warps} warps, {t.stages} stages"


def _predicted(c: Candidate) -> float:
    assert c.cost is not None
    return c.cost.predicted_us


def _choice_reason(spec: AttentionSpec, kind: PipelineKind, best: Candidate, fitting: list[Candidate]) -> str:
    """Why `best` (the first of `fitting` by _rank_key): the measured tile table, or the lowest predicted
    time; where the table overrode the cost model, the model's own pick and both predictions."""
    from . import planner_hopper

    assert best.cost is not None
    cost = best.cost
    parts = (f"{cost.blocks_per_sm} blocks/SM, HBM {cost.t_hbm_us} us, MMA {cost.t_mma_us} us, "
             f"smem {cost.t_smem_us} us")
    others = [c for c in fitting if c is not best]
    runner = f"; next best {min(map(_predicted, others))} us" if others else ""
    lowest = f"lowest predicted time {cost.predicted_us} us at seqlen {REF_SEQLEN} ({parts}){runner}"
    measured = kind.is_hopper and spec.head_dim in planner_hopper.MEASURED_TILES and _rank_key(spec, best)[0] == 0
    if not measured:
        return lowest
    table = (f"the measured tiles of hd{spec.head_dim} (planner_hopper.MEASURED_TILES: "
             f"{describe_tiling(best.tiling)}; an H100 sweep measured them fastest)")
    model_pick = min(fitting, key=lambda c: (_predicted(c), c.smem_bytes, c.regs_estimate))
    if _predicted(model_pick) < cost.predicted_us:
        return (f"{table}, chosen over the cost model's pick [{describe_tiling(model_pick.tiling)}] "
                f"({_predicted(model_pick)} us predicted; this one {cost.predicted_us} us at seqlen {REF_SEQLEN}: "
                f"{parts})")
    return f"{table}, also the {lowest}"


def plan_with(spec: AttentionSpec, arch: Arch | str, tiling: Tiling,
              pipeline: PipelineKind | None = None) -> KernelPlan:
    """The plan for one given tiling (sweeps, ablations and tests); PlanError when it does not fit.
    `pipeline` overrides the spec's strategy."""
    arch = Arch(arch)
    if pipeline is not None:
        spec = spec.model_copy(update={"pipeline": spec.pipeline.model_copy(update={"kind": pipeline})})
    kind = resolve_pipeline(spec, arch)
    if kind.is_hopper != (tiling.consumer_warpgroups > 0):
        raise PlanError(f"tiling {tiling.model_dump()} is not a {kind.value} tiling")
    cand = _evaluate_one(spec, arch_info(arch), kind, tiling)
    if not cand.fits:
        raise PlanError(f"tiling {tiling.model_dump()} does not fit {arch.value}: {cand.reason}")
    return _assemble(spec, arch, kind, cand, "tiling given explicitly", (cand,))


def _assemble(spec: AttentionSpec, arch: Arch, kind: PipelineKind, best: Candidate, reason: str,
              candidates: tuple[Candidate, ...]) -> KernelPlan:
    from . import planner_hopper

    info = arch_info(arch)
    assert best.cost is not None
    t = best.tiling
    name = kernel_name(spec, arch, kind)
    if kind.is_hopper:
        roles = planner_hopper.roles(info, t.consumer_warpgroups, kind is PipelineKind.pingpong, t.intra_wg_overlap)
        return KernelPlan(spec=spec, arch=arch, pipeline=kind, kernel_name=name, tiling=t, threads=t.num_warps * 32,
                          smem_bytes=best.smem_bytes, smem=planner_hopper.smem_layout(spec, t),
                          regs_estimate=best.regs_estimate, min_blocks_per_sm=1, cost=best.cost, reason=reason,
                          candidates=candidates, roles=roles)
    # __launch_bounds__ min blocks: as many as the budget lets reside, while keeping the 255 cap.
    min_blocks = max(1, min(best.cost.blocks_per_sm, info.regs_per_sm // (t.num_warps * 32 * 255) or 1))
    return KernelPlan(spec=spec, arch=arch, pipeline=kind, kernel_name=name,
                      tiling=t, threads=t.num_warps * 32, smem_bytes=best.smem_bytes,
                      smem=smem_layout(spec, t), regs_estimate=best.regs_estimate,
                      min_blocks_per_sm=min_blocks, cost=best.cost, reason=reason,
                      candidates=candidates)


def _no_fit_message(spec: AttentionSpec, arch: Arch, kind: PipelineKind, candidates: list[Candidate]) -> str:
    tiles = _overrides(spec)
    outside = search_space.outside(tiles, [search_space.SPACES[kind.value]]) if tiles else None
    if outside is not None:
        return _outside_space_message(spec, arch, kind, outside)
    return _budget_message(spec, arch, candidates)


def _outside_space_message(spec: AttentionSpec, arch: Arch, kind: PipelineKind, outside: str) -> str:
    """Tile overrides the pipeline never tries: what it tries, and which pipelines would take them."""
    tiles = _overrides(spec)
    elsewhere = [s for s in search_space.SPACES.values() if s.pipeline != kind.value and s.holds(tiles)]
    remedy = f"Remedy: pick tiles the {kind.value} pipeline tries or drop the spec's 'tiles' overrides"
    if elsewhere:
        names = " or ".join(f"'{s.pipeline}'{search_space.only_note(s)}" for s in elsewhere)
        remedy = f"{remedy}; or use pipeline {names}, which tries these tiles"
    return (f"spec '{spec.name}' plans with the {kind.value} pipeline on {arch.value}, whose search space does not "
            f"hold its tiles: {outside}.\n{remedy}.")


def _budget_message(spec: AttentionSpec, arch: Arch, candidates: list[Candidate]) -> str:
    """No candidate the spec allows fits: the budget, each rejection's arithmetic, and a remedy."""
    # With tile overrides, only the candidates the spec asked for explain the failure.
    relevant = [c for c in candidates if _override_mismatch(spec, c.tiling) is None] or candidates
    smallest = min(relevant, key=lambda c: c.smem_bytes)
    lines = [f"no tiling of spec '{spec.name}' fits the {arch.value} budget "
             f"({arch_info(arch).smem_per_block} B shared memory per block, 255 registers per thread)."]
    reasons = list(dict.fromkeys(c.reason for c in relevant))
    lines += [f"  rejected: {r}" for r in reasons[:6]]
    if len(reasons) > 6:
        lines.append(f"  ... and {len(reasons) - 6} more")
    lines.append(f"smallest candidate needs {smallest.smem_bytes} B. Remedy: drop or relax the spec's "
                 f"'tiles' overrides, use fewer pipeline stages, or target an arch with more shared memory.")
    return "\n".join(lines)
