"""Planner tables: every catalogue spec fits every arch's budget, the budget changes the plan where it
binds, rejections carry their arithmetic, and tile overrides are honoured or refused with the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from attngen.errors import PlanError, SpecError
from attngen.families.sm80_fwd import smem_layout
from attngen.families.sm90_fwd import describe_tiling
from attngen.families.sm90_fwd_measured import measured_preference, measured_tiles
from attngen.planning.archs import arch_info
from attngen.planning.ir import Candidate, KernelPlan, Tiling
from attngen.planning.planner import plan
from attngen.spec.loader import load_spec, load_spec_text
from attngen.spec.model import Arch, AttentionSpec, Pipeline, PipelineKind, Tiles

from .plan_checks import assert_within_budget

SPECS = Path(__file__).resolve().parent.parent / "specs"
CATALOGUE = sorted(SPECS.glob("*.yaml"))
ARCHS = [Arch.sm80, Arch.sm86, Arch.sm89, Arch.sm90, Arch.sm100, Arch.sm120]
SMALL_SMEM = 101376   # sm86, sm89, sm120: 99 KB per block
LARGE_SMEM = 232448   # sm90, sm100: 227 KB per block


def hd256(**extra: object) -> AttentionSpec:
    return AttentionSpec.model_validate({"head_dim": 256, "dtype": "bf16", **extra})


@pytest.mark.parametrize("arch", ARCHS, ids=[a.value for a in ARCHS])
@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_catalogue_plans_within_budget(path: Path, arch: Arch) -> None:
    spec = load_spec(path)
    p = plan(spec, arch)
    assert_within_budget(p)
    # pipeline auto: a Hopper pipeline on sm90 wherever it serves the spec (head dims that are multiples
    # of 64): the measured one for the head dim, else ping-pong.
    hopper = arch is Arch.sm90 and spec.head_dim % 64 == 0
    measured = measured_tiles(spec)
    want = (measured.pipeline if measured else PipelineKind.pingpong) if hopper else PipelineKind.multistage
    assert p.pipeline is want


def test_arch_budgets_match_the_vendor_figures() -> None:
    assert arch_info(Arch.sm80).smem_per_block == 166912
    for arch in (Arch.sm86, Arch.sm89, Arch.sm120):
        assert arch_info(arch).smem_per_block == SMALL_SMEM
    for arch in (Arch.sm90, Arch.sm100):
        assert arch_info(arch).smem_per_block == LARGE_SMEM


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_hd256_plans_differ_where_the_budget_binds(dtype: str) -> None:
    spec = AttentionSpec(head_dim=256, dtype=dtype)
    small, large = plan(spec, Arch.sm86), plan(spec, Arch.sm90)
    assert small.smem_bytes <= SMALL_SMEM and large.smem_bytes <= LARGE_SMEM
    assert small.smem_bytes != large.smem_bytes
    assert small.tiling != large.tiling
    # The sm90 choice is out of sm86's reach: the budget, not taste, made them differ.
    assert smem_layout(spec, large.tiling).total_bytes > SMALL_SMEM


def test_rejections_carry_their_arithmetic() -> None:
    p = plan(hd256(), Arch.sm86)
    over = [c for c in p.candidates if c.smem_bytes > SMALL_SMEM]
    assert over, "hd256 on sm86 must reject some tilings for shared memory"
    for cand in over:
        assert not cand.fits
        assert f"needs {cand.smem_bytes} B of shared memory" in cand.reason
        assert f"sm86 allows {SMALL_SMEM} B per block" in cand.reason
        layout = smem_layout(p.spec, cand.tiling)
        assert f"({layout.q_bytes} Q + {cand.tiling.stages} x {layout.stage_bytes} K/V)" in cand.reason
    big = plan(hd256().model_copy(update={"pipeline": Pipeline(kind=PipelineKind.multistage)}), Arch.sm90)
    spilled = [c for c in big.candidates if c.smem_bytes <= 232448 and c.regs_estimate > 255]
    assert spilled and all("registers per thread" in c.reason and "spill" in c.reason for c in spilled)


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_the_measured_single_buffer_tiling_outranks_the_model_only_where_measured(mask: str) -> None:
    """sm80_fwd.MEASURED: hd256 multistage on sm90 takes 64 x 64, 4 warps, one K/V buffer (two blocks an SM) and says
    why; the same tiling is refused with its reason on other archs, and a spec that names its stages keeps them."""
    spec = hd256(mask=mask, pipeline={"kind": "multistage"})
    p = plan(spec, Arch.sm90)
    t = p.tiling
    assert (t.block_m, t.block_n, t.num_warps, t.stages, t.q_in_regs) == (64, 64, 4, 1, False)
    assert p.smem_bytes == 64 * 256 * 2 * 3 and p.reason.startswith("measured fastest on the H100")
    assert "the model's best" in p.reason
    for arch in (Arch.sm80, Arch.sm100):
        other = plan(spec, arch)
        assert other.tiling.stages >= 2
        single = [c for c in other.candidates if c.tiling.stages == 1]
        assert single and all(not c.fits and "one K/V buffer is measured only where MEASURED names it (sm90 hd256)"
                              in c.reason for c in single)
    pinned = plan(hd256(mask=mask, pipeline={"kind": "multistage", "stages": 2}), Arch.sm90)
    assert pinned.tiling.stages == 2 and all(c.tiling.stages == 2 for c in pinned.candidates)
    hd128 = AttentionSpec(head_dim=128, dtype="bf16", pipeline={"kind": "multistage"})
    assert plan(hd128, Arch.sm90).tiling.stages >= 2


def test_every_fitting_candidate_is_within_budget_and_the_cheapest_is_chosen() -> None:
    for path in CATALOGUE:
        spec = load_spec(path)
        for arch in ARCHS:
            p = plan(spec, arch)
            fitting = [c for c in p.candidates if c.fits]
            assert all(c.smem_bytes <= arch_info(arch).smem_per_block and c.regs_estimate <= 255
                       for c in fitting)
            want = measured_tiles(spec)
            if p.roles is not None and want is not None:
                # The Hopper tile table outranks the model: its entry, with the overlap, is chosen.
                assert (p.block_n, p.stages, p.roles.intra_wg_overlap) == (want.block_n, want.stages, want.overlap)
                assert p.roles.consumer_warpgroups == want.consumer_warpgroups and p.pipeline is want.pipeline
                assert "measured tiles" in p.reason
                fitting = [c for c in fitting if measured_preference(spec, c.tiling) == 0]
            best = min(c.cost.predicted_us for c in fitting if c.cost is not None)
            assert p.cost.predicted_us == best
            assert str(p.cost.predicted_us) in p.reason


def test_tile_override_that_cannot_fit_names_the_budget_and_a_remedy() -> None:
    spec = hd256(tiles={"block_m": 128, "block_n": 128})
    with pytest.raises(PlanError) as caught:
        plan(spec, Arch.sm86)
    message = str(caught.value)
    assert f"{SMALL_SMEM} B shared memory per block" in message
    assert "sm86" in message and "Remedy" in message and "'tiles'" in message


def _tiles_of(tiling: Tiling) -> dict[str, int]:
    return {"block_m": tiling.block_m, "block_n": tiling.block_n, "num_warps": tiling.num_warps}


@pytest.mark.parametrize(("head_dim", "arch"), [(64, Arch.sm80), (128, Arch.sm86), (128, Arch.sm90),
                                                (256, Arch.sm90), (192, Arch.sm100)])
def test_tile_override_that_fits_is_honoured(head_dim: int, arch: Arch) -> None:
    free = plan(AttentionSpec(head_dim=head_dim, dtype="fp16"), arch)
    others = [c.tiling for c in free.candidates if c.fits and _tiles_of(c.tiling) != _tiles_of(free.tiling)]
    assert others, "a fitting tiling other than the free choice must exist to override with"
    tiles = _tiles_of(others[0])
    lines = "".join(f"  {key}: {value}\n" for key, value in tiles.items())
    forced = plan(load_spec_text(f"head_dim: {head_dim}\ndtype: fp16\ntiles:\n{lines}"), arch)
    assert _tiles_of(forced.tiling) == tiles
    assert forced.smem_bytes <= arch_info(arch).smem_per_block
    assert all(not c.fits for c in forced.candidates if _tiles_of(c.tiling) != tiles)
    assert any(c.reason == f"excluded by the spec: tiles.{key} is {tiles[key]}"
               for c in forced.candidates for key in tiles)


def test_single_field_override_leaves_the_rest_to_the_cost_model() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16")
    free = plan(spec, Arch.sm90)
    other_n = next(c.tiling.block_n for c in free.candidates if c.fits and c.tiling.block_n != free.block_n)
    forced = plan(spec.model_copy(update={"tiles": Tiles(block_n=other_n)}), Arch.sm90)
    assert forced.block_n == other_n
    same_n = [c for c in forced.candidates if c.tiling.block_n == other_n and c.fits]
    assert forced.cost.predicted_us == min(c.cost.predicted_us for c in same_n if c.cost is not None)


def test_stage_count_is_honoured_or_refused_with_the_budget() -> None:
    three = plan(AttentionSpec(head_dim=64, dtype="bf16", pipeline={"kind": "multistage", "stages": 3}),
                 Arch.sm90)
    assert three.stages == 3
    with pytest.raises(PlanError, match=f"{SMALL_SMEM} B shared memory per block"):
        plan(hd256(pipeline={"kind": "multistage", "stages": 5}), Arch.sm86)


def test_plan_summary_has_the_promised_keys() -> None:
    p = plan(load_spec(SPECS / "bloom_alibi_bf16_hd128.yaml"), Arch.sm90)   # a score mod: hd128's ping-pong tiles
    summary = p.summary()
    for key in ("block_m", "block_n", "num_warps", "stages", "smem_bytes", "pipeline"):
        assert key in summary
    assert [summary[k] for k in ("block_m", "block_n", "num_warps")] == [p.block_m, p.block_n, p.num_warps]
    assert (summary["stages"], summary["smem_bytes"]) == (p.stages, p.smem_bytes)
    assert summary["pipeline"] == "pingpong" and summary["arch"] == "sm90"
    assert summary["roles"] == p.roles.model_dump() and p.roles.pingpong


def test_planning_is_deterministic_and_accepts_arch_names() -> None:
    spec = load_spec(SPECS / "sliding_window_bf16_hd128.yaml")
    assert plan(spec, "sm89") == plan(spec, Arch.sm89)
    assert "window_256_0" in plan(spec, Arch.sm89).kernel_name


def test_override_outside_the_search_space_names_the_space_not_the_budget() -> None:
    # The spec refuses such tiles; one made without validation reaches the planner.
    with pytest.raises(SpecError, match="tiles.num_warps 2: "):
        AttentionSpec(head_dim=64, dtype="fp16", tiles={"num_warps": 2})
    spec = AttentionSpec(head_dim=64, dtype="fp16").model_copy(update={"tiles": Tiles.model_construct(num_warps=2)})
    with pytest.raises(PlanError) as caught:
        plan(spec, Arch.sm90)
    message = str(caught.value)
    assert message.startswith("spec 'none_fp16_hd64' plans with the warp_specialized pipeline on sm90, whose search "
                              "space does not hold its tiles: tiles.num_warps 2: the warp_specialized pipeline tries "
                              "num_warps 12 or 16 (sm90 only); 2 is not among them."), message
    assert "Remedy" in message and "shared memory" not in message and "smallest candidate" not in message


def test_auto_tiles_another_arch_would_take_are_refused_with_that_pipeline() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_m": 192})  # warp_specialized on sm90 only
    assert plan(spec, Arch.sm90).pipeline is PipelineKind.warp_specialized
    with pytest.raises(PlanError) as caught:
        plan(spec, Arch.sm86)
    message = str(caught.value)
    assert "the multistage pipeline tries block_m 64 or 128; 192 is not among them" in message
    assert "use pipeline 'warp_specialized' (sm90 only), which tries these tiles" in message
    assert "shared memory" not in message


def test_hopper_pipelines_name_what_they_cannot_serve() -> None:
    with pytest.raises(SpecError, match="pipeline 'pingpong' needs a head_dim that is a multiple of 64.*Remedy"):
        AttentionSpec(head_dim=96, dtype="bf16", pipeline="pingpong")
    hd96 = AttentionSpec(head_dim=96, dtype="bf16")
    with pytest.raises(PlanError, match="multiple of 64.*Remedy"):
        plan(hd96.model_copy(update={"pipeline": Pipeline(kind=PipelineKind.pingpong)}), Arch.sm90)
    with pytest.raises(PlanError, match="sm100 has no wgmma.*Remedy"):
        plan(AttentionSpec(head_dim=128, dtype="bf16", pipeline="warp_specialized"), Arch.sm100)
    # auto falls back to multistage where the Hopper planner cannot serve the spec.
    assert plan(hd96, Arch.sm90).pipeline is PipelineKind.multistage
    assert plan(AttentionSpec(head_dim=128, dtype="bf16"), Arch.sm100).pipeline is PipelineKind.multistage


def _model_pick(p: KernelPlan) -> Candidate:
    """The fitting candidate the cost model alone would choose."""
    return min((c for c in p.candidates if c.fits and c.cost is not None),
               key=lambda c: (c.cost.predicted_us if c.cost else 0.0, c.smem_bytes, c.regs_estimate))


def test_reason_names_the_measured_tiles_and_the_cost_models_pick_they_overrode() -> None:
    p = plan(load_spec(SPECS / "causal_bf16_hd128.yaml"), Arch.sm90)
    pick = _model_pick(p)
    assert pick.cost is not None and pick.cost.predicted_us < p.cost.predicted_us  # the table overrode the model
    assert p.reason.startswith("the measured tiles of hd128 (sm90_fwd_measured.MEASURED_TILES_BAND: 3 consumer "
                               "warpgroups, block_n 128, 2 stages, overlap False; an H100 sweep measured them "
                               "fastest), chosen "
                               f"over the cost model's pick [{describe_tiling(pick.tiling)}] "
                               f"({pick.cost.predicted_us} us predicted; this one {p.cost.predicted_us} us at seqlen"
                               ), p.reason
    assert "lowest predicted" not in p.reason and "next best" not in p.reason


def test_reason_says_lowest_predicted_time_only_when_it_is() -> None:
    measured_and_lowest = plan(hd256(), Arch.sm90)
    assert _model_pick(measured_and_lowest).tiling == measured_and_lowest.tiling
    assert measured_and_lowest.reason.startswith("the measured tiles of hd256 (sm90_fwd_measured.MEASURED_TILES: ")
    assert f"also the lowest predicted time {measured_and_lowest.cost.predicted_us} us" in measured_and_lowest.reason
    model = plan(load_spec(SPECS / "causal_bf16_hd128.yaml"), Arch.sm80)
    assert _model_pick(model).tiling == model.tiling
    assert model.reason.startswith(f"lowest predicted time {model.cost.predicted_us} us at seqlen 4096 (")
    runner = min(c.cost.predicted_us for c in model.candidates if c.fits and c.cost and c.tiling != model.tiling)
    assert model.reason.endswith(f"; next best {runner} us")
    for path in CATALOGUE:
        for arch in ARCHS:
            p = plan(load_spec(path), arch)
            lowest = _model_pick(p).tiling == p.tiling
            assert ("lowest predicted time" in p.reason) == lowest, p.reason
            assert ("chosen over the cost model's pick" in p.reason) != lowest, p.reason


def test_hopper_register_split_and_budget_rejections() -> None:
    p = plan(AttentionSpec(head_dim=256, dtype="bf16", pipeline="warp_specialized"), Arch.sm90)
    by_wgs = {c.tiling.consumer_warpgroups for c in p.candidates}
    assert by_wgs == {2, 3}
    too_big = [c for c in p.candidates if c.smem_bytes > LARGE_SMEM]
    assert too_big and all(not c.fits and f"allows {LARGE_SMEM} B per block" in c.reason for c in too_big)
    starved = [c for c in p.candidates if not c.fits and "registers" in c.reason]
    assert starved and all("consumer warpgroups get" in c.reason for c in starved)
    assert_within_budget(p)


def test_every_arch_field_is_read() -> None:
    """The budget table holds no field that nothing reads (each one is named outside archs.py)."""
    import dataclasses
    import pathlib
    import re

    from attngen.planning.archs import ArchInfo

    package = pathlib.Path(__file__).resolve().parent.parent / "attngen"
    sources = "\n".join(p.read_text() for p in package.rglob("*.py") if p.name != "archs.py")
    unread = [f.name for f in dataclasses.fields(ArchInfo) if not re.search(rf"\.{f.name}\b", sources)]
    assert unread == [], f"ArchInfo fields nothing reads: {unread}"


def test_matmul_ceilings_cover_every_arch_and_say_where_they_come_from() -> None:
    """One ceiling per generation; the measured one agrees with the committed bench runs' ceilings, the others
    are labelled the vendor's."""
    import json
    import statistics

    from attngen.planning.archs import MATMUL_CEILINGS, matmul_ceiling

    assert set(MATMUL_CEILINGS) == set(Arch)
    for arch, ceiling in MATMUL_CEILINGS.items():
        assert ceiling.arch is arch and matmul_ceiling(arch) is ceiling and ceiling.flops_per_s > 0
        assert ceiling.source.startswith(ceiling.kind + ":"), ceiling.source
    assert [a for a, c in MATMUL_CEILINGS.items() if c.measured] == [Arch.sm90]
    runs = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "h100"
    measured = [json.loads(p.read_text())["ceilings"] for p in runs.rglob("bench.json")]
    bf16 = [c["matmul_tflops"] for c in measured if c.get("matmul_dtype") == "bf16"]
    assert len(bf16) >= 5 and abs(statistics.median(bf16) - matmul_ceiling(Arch.sm90).tflops) < 15
    # Below the vendor's dense wgmma figure the arch table computes (4096 FLOP/clk x 132 SMs x 1.83 GHz = 989).
    info = arch_info(Arch.sm90)
    assert matmul_ceiling(Arch.sm90).flops_per_s < info.wgmma_flops_per_clk * info.num_sms_hint * info.clock_ghz * 1e9


def test_8bit_matmul_ceilings_say_where_they_come_from_and_fall_back_by_name() -> None:
    """The 8-bit ceilings: sm90's measured one agrees with the committed run (benchmarks/fp8_matmul_ceiling.py) and
    sits between the 16-bit ceiling and twice the vendor's 16-bit wgmma rate; an arch without one falls back to its
    16-bit ceiling and says so."""
    import json
    import statistics

    from attngen.planning.archs import MATMUL_CEILINGS, MATMUL_CEILINGS_8BIT, matmul_ceiling

    for arch, ceiling in MATMUL_CEILINGS_8BIT.items():
        assert ceiling.arch is arch and ceiling.bits == 8 and matmul_ceiling(arch, 8) is ceiling
        assert ceiling.source.startswith(ceiling.kind + ":") and ceiling.flops_per_s > MATMUL_CEILINGS[arch].flops_per_s
    run = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "h100" / "fp8_ceiling" / "ceilings.json"
    rounds = json.loads(run.read_text())["tflops"]["fp8_e4m3"]
    assert len(rounds) >= 5 and abs(statistics.median(rounds) - matmul_ceiling(Arch.sm90, 8).tflops) < 15
    info = arch_info(Arch.sm90)
    vendor_16bit = info.wgmma_flops_per_clk * info.num_sms_hint * info.clock_ghz * 1e9
    assert matmul_ceiling(Arch.sm90, 8).flops_per_s < 2 * vendor_16bit
    fallback = matmul_ceiling(Arch.sm120, 8)
    assert fallback.bits == 16 and fallback.flops_per_s == MATMUL_CEILINGS[Arch.sm120].flops_per_s
    assert "no 8-bit figure recorded for sm120" in fallback.source
    assert matmul_ceiling(Arch.sm90) is MATMUL_CEILINGS[Arch.sm90]


def test_sm90_forward_predictions_stay_under_the_measured_matmul_ceiling() -> None:
    """Every catalogue spec's sm90 forward plan predicts at most the GPU's measured matmul rate (the sm90_fwd model
    promised 803 TFLOP/s at hd128, 1.06 of it, before its recalibration on h100/model_1)."""
    from attngen.planning.archs import matmul_ceiling

    ceiling = matmul_ceiling(Arch.sm90).flops_per_s
    for path in CATALOGUE:
        p = plan(load_spec(path), Arch.sm90)
        assert p.cost.flops / (p.cost.predicted_us * 1e-6) <= ceiling, (path.name, p.cost)


def test_sm90_forward_ranks_by_rank_us_and_its_calibrated_pick_agrees_on_the_catalogue() -> None:
    """sm90_fwd ranks by rank_us (its model as the H100 sweeps checked it); predicted_us adds what model_1
    calibrated. On the catalogue both pick the same tiling, so the reasons' 'lowest predicted time' and 'the cost
    model's pick' hold of the predicted times they print."""
    for path in CATALOGUE:
        p = plan(load_spec(path), Arch.sm90)
        if p.family != "sm90_fwd":
            continue
        fitting = [c for c in p.candidates if c.fits and c.cost is not None]
        assert all(c.cost is not None and c.cost.rank_us is not None for c in fitting)
        picks = [min(fitting, key=lambda c, field=field: (getattr(c.cost, field), c.smem_bytes, c.regs_estimate))
                 for field in ("rank_us", "predicted_us")]
        assert picks[0].tiling == picks[1].tiling, path.name


def test_the_calibrated_terms_move_no_sm90_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the calibration (products at the datasheet rate, HIDDEN alone, no per-block clocks, no partial-mask
    slowdown) every plan is the same: the catalogue, and an hd64 spec with block_n 96, whose 128- and 192-row
    tilings the calibrated times alone would order the other way round."""
    import attngen.families.sm90_fwd_cost as fwd

    specs = [load_spec(p) for p in CATALOGUE] + [AttentionSpec(head_dim=64, dtype="bf16", tiles=Tiles(block_n=96))]
    calibrated = [plan(s, Arch.sm90) for s in specs]
    monkeypatch.setattr(fwd, "mma_flops_per_us", lambda info, bits=16: fwd.peak_flops_per_us(info))
    monkeypatch.setattr(fwd, "softmax_hidden", lambda t, pingpong: fwd.HIDDEN[(pingpong, t.intra_wg_overlap)])
    monkeypatch.setattr(fwd, "BLOCK_OVERHEAD_CLK", 0)
    monkeypatch.setattr(fwd, "PARTIAL_MASK_SLOWDOWN", 1.0)
    for spec, before in zip(specs, calibrated, strict=True):
        after = plan(spec, Arch.sm90)
        assert (after.pipeline, after.tiling) == (before.pipeline, before.tiling), spec.name
        if after.family == "sm90_fwd":  # uncalibrated, the two times are one
            assert after.cost.predicted_us == after.cost.rank_us == before.cost.rank_us, spec.name
    hd64 = [c for c in calibrated[-1].candidates if c.fits and c.cost is not None]
    assert min(hd64, key=lambda c: c.cost.predicted_us).tiling != calibrated[-1].tiling  # type: ignore[union-attr]


def test_band_hd64_takes_its_own_measured_tiles_and_a_spill_falls_back_to_the_general_ones() -> None:
    """hd64 with a band mask (none, causal, a window) and no score mod: 192 x 128 with the overlap
    (MEASURED_TILES_BAND), admitted by the band register overhead; other masks and score mods keep MEASURED_TILES'
    tiles without it, and reject the overlapped tiles on their registers. A build that excludes the band tiles (a
    spill) gets the general measured ones."""
    def key(p: KernelPlan) -> tuple[object, ...]:
        assert p.roles is not None
        return (p.roles.consumer_warpgroups, p.block_m, p.block_n, p.stages, p.roles.intra_wg_overlap)

    def spec(**update: object) -> AttentionSpec:
        return AttentionSpec.model_validate({"head_dim": 64, "dtype": "bf16", **update})

    band = [plan(spec(mask=m), Arch.sm90) for m in ("none", "causal", {"kind": "sliding_window", "window": [128, 0]})]
    for p in band:
        assert key(p) == (3, 192, 128, 2, True)
        assert p.reason.startswith("the measured tiles of hd64 (sm90_fwd_measured.MEASURED_TILES_BAND: 3 consumer ")
    for other in (spec(mask={"kind": "chunked", "chunk": 256}), spec(mask="causal", score_mod={"softcap": 30.0})):
        p = plan(other, Arch.sm90)
        assert key(p) == (3, 192, 128, 2, False)
        assert p.reason.startswith("the measured tiles of hd64 (sm90_fwd_measured.MEASURED_TILES: ")
        overlapped = [c for c in p.candidates if describe_tiling(c.tiling) == describe_tiling(band[0].tiling)]
        assert overlapped and all(not c.fits and "consumer needs ~176 registers" in c.reason for c in overlapped)
    fallback = plan(spec(mask="causal"), Arch.sm90, exclude={band[1].tiling: "spilled"})
    assert key(fallback) == (3, 192, 128, 2, False)
    assert fallback.reason.startswith("the measured tiles of hd64 (sm90_fwd_measured.MEASURED_TILES: ")
    assert key(plan(AttentionSpec(head_dim=128, dtype="bf16", score_mod={"softcap": 30.0}), Arch.sm90)) == (
        2, 128, 128, 2, True)
