"""The kernel families: one registry that the planner, the renderer and the launcher loop over; each
family says what it serves (or why not), and `auto`'s preference is the families' data and order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attngen import families
from attngen.errors import PlanError
from attngen.families import Direction
from attngen.families.sm90_fwd_measured import measured_tiles
from attngen.planning.ir import MultistageTiling, WarpSpecializedTiling
from attngen.planning.planner import ForwardFamily, choose, considered, forward_families, plan, plan_with
from attngen.spec.model import HEAD_DIMS, Arch, AttentionSpec, PipelineKind, Tiles

PACKAGE = Path(__file__).resolve().parent.parent / "attngen"


def test_forward_families_are_registered_fastest_path_first() -> None:
    names = [f.name for f in forward_families()]
    assert names == ["sm90_fwd", "sm80_fwd"]
    for family in forward_families():
        assert isinstance(family, ForwardFamily) and family.direction is Direction.forward
        assert families.get(family.name) is family
        cover = family.coverage()
        assert set(cover.pipelines) == {k.value for k in family.pipelines}
        assert cover.archs and cover.head_dims and cover.dtypes and cover.masks
    assert families.get("sm80_fwd").path == "mma.sync + cp.async"
    assert families.get("sm90_fwd").coverage().archs == ("sm90",)
    with pytest.raises(KeyError, match="no kernel family 'sm70_fwd'"):
        families.get("sm70_fwd")


@pytest.mark.parametrize("arch", list(Arch), ids=[a.value for a in Arch])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_serving_matches_coverage_and_auto_takes_the_first(arch: Arch, head_dim: int) -> None:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16")
    serving, refused = families.serving(spec, arch, Direction.forward)
    for family in forward_families():
        cover = family.coverage()
        covered = arch.value in cover.archs and head_dim in cover.head_dims
        assert (family in serving) == covered, (family.name, refused.get(family.name))
    assert serving[-1].name == "sm80_fwd"  # the multistage kernel serves every spec on every arch
    p = plan(spec, arch)
    assert p.family == serving[0].name and p.summary()["family"] == p.family
    hopper = arch is Arch.sm90 and head_dim % 64 == 0
    assert p.family == ("sm90_fwd" if hopper else "sm80_fwd")
    if hopper:  # the family's measured table picks its pipeline
        want = measured_tiles(spec)
        assert p.pipeline is (want.pipeline if want else PipelineKind.pingpong)


def test_a_named_pipeline_goes_to_its_family_or_is_refused_with_its_reason() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", pipeline="multistage")
    choice = choose(spec, Arch.sm90)
    assert (choice.family.name, choice.pipeline) == ("sm80_fwd", PipelineKind.multistage)
    assert choice.others["sm90_fwd"] == ("the spec names pipeline 'multistage'; sm90_fwd runs warp_specialized "
                                         "or pingpong")
    assert plan(spec, Arch.sm90).family == "sm80_fwd"
    with pytest.raises(PlanError) as caught:
        plan(AttentionSpec(head_dim=128, dtype="bf16", pipeline="pingpong"), Arch.sm100)
    assert str(caught.value) == ("spec 'none_bf16_hd128' asks for pipeline 'pingpong', but sm100 has no wgmma (the "
                                 "Hopper pipelines need sm_90a). Remedy: use pipeline 'auto' or 'multistage' for this "
                                 "spec or arch")


def test_auto_with_tiles_only_multistage_tries_takes_multistage_on_sm90() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_n": 32})
    choice = choose(spec, Arch.sm90)
    assert choice.family.name == "sm80_fwd" and "tries its tiles {block_n: 32}" in choice.why
    assert choice.others["sm90_fwd"] == "its pipelines never try tiles {block_n: 32}"
    assert plan(spec, Arch.sm90).block_n == 32
    # block_m 192: warp_specialized's space only, chosen over hd128's measured ping-pong (a score mod keeps hd128 on
    # MEASURED_TILES' ping-pong; band masks measured 192-row warp_specialized tiles fastest).
    wide = choose(AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_m": 192}, score_mod={"softcap": 30}),
                  Arch.sm90)
    assert (wide.family.name, wide.pipeline) == ("sm90_fwd", PipelineKind.warp_specialized)
    assert "whose search space holds the tiles" in wide.why


def test_auto_with_no_serving_family_is_a_plan_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(families.get("sm80_fwd"), "refuses", lambda spec, arch: "switched off in this test")
    with pytest.raises(PlanError, match="no forward kernel family serves spec 'none_bf16_hd96' on sm80: "
                                        "sm90_fwd: sm80 has no wgmma .*; sm80_fwd: switched off in this test"):
        plan(AttentionSpec(head_dim=96, dtype="bf16"), Arch.sm80)


def test_considered_names_every_forward_family_and_why() -> None:
    p = plan(AttentionSpec(head_dim=128, dtype="bf16"), Arch.sm90)
    verdicts = dict(considered(p))
    assert list(verdicts) == ["sm90_fwd", "sm80_fwd"]
    assert verdicts["sm90_fwd"].startswith("chosen (TMA + wgmma, warp-specialized / ping-pong): pipeline auto: ")
    assert "the measured pipeline of hd128 (sm90_fwd_measured.MEASURED_TILES_BAND)" in verdicts["sm90_fwd"]
    assert verdicts["sm80_fwd"].startswith("serves the spec, but sm90_fwd comes before it in FAMILIES' order; "
                                           "its own pick [block_m ")
    assert f"sm90_fwd's plan {p.cost.predicted_us} us" in verdicts["sm80_fwd"]
    other = dict(considered(plan(AttentionSpec(head_dim=96, dtype="bf16"), Arch.sm90)))
    assert other["sm90_fwd"] == ("head_dim 96 is not a multiple of 64: the 128-byte swizzled TMA boxes hold 64 "
                                 "columns each")
    assert other["sm80_fwd"].startswith("chosen (mma.sync + cp.async)")


def test_plan_with_checks_the_tiling_belongs_to_the_family() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16")
    free = plan(spec, Arch.sm90)
    again = plan_with(spec, Arch.sm90, free.tiling)
    assert (again.family, again.tiling, again.reason) == ("sm90_fwd", free.tiling, "tiling given explicitly")
    multistage = plan(spec, Arch.sm80).tiling
    assert plan_with(spec, Arch.sm90, multistage, pipeline=PipelineKind.multistage).family == "sm80_fwd"
    with pytest.raises(PlanError, match="is not a warp_specialized tiling"):   # hd128's auto pipeline
        plan_with(spec, Arch.sm90, multistage)


@pytest.mark.parametrize(("kind", "tiling_type"), [(PipelineKind.multistage, MultistageTiling),
                                                   (PipelineKind.warp_specialized, WarpSpecializedTiling),
                                                   (PipelineKind.pingpong, WarpSpecializedTiling)])
def test_each_forward_family_plans_its_own_tiling_type(kind: PipelineKind, tiling_type: type) -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", pipeline=kind)
    p = plan(spec, Arch.sm90)
    assert type(p.tiling) is tiling_type and all(type(c.tiling) is tiling_type for c in p.candidates)
    shared = set(MultistageTiling.model_fields) & set(WarpSpecializedTiling.model_fields)
    assert shared == {"block_m", "block_n", "num_warps", "stages"}
    # The summary keeps the multistage fields for every plan: a consumer warp owns one 16-row tile, Q stays in
    # shared memory.
    summary = p.summary()
    assert (summary["warp_m_tiles"], summary["q_in_regs"]) == (p.tiling.warp_m_tiles, p.tiling.q_in_regs)
    if tiling_type is WarpSpecializedTiling:
        assert (summary["warp_m_tiles"], summary["q_in_regs"]) == (1, False)


def test_tile_overrides_still_steer_the_plan_inside_a_family() -> None:
    spec = AttentionSpec(head_dim=256, dtype="bf16", tiles=Tiles(block_n=64))
    p = plan(spec, Arch.sm90)
    assert p.family == "sm90_fwd" and p.block_n == 64


GENERIC = ["planning/planner.py", "codegen/renderer.py", "runtime/kernel.py", "cli.py", "toolchain/builder.py",
           "catalogue.py"]


@pytest.mark.parametrize("path", GENERIC)
def test_generic_code_never_asks_which_forward_family_it_holds(path: str) -> None:
    """No pipeline tests, no Hopper module and no warpgroup arithmetic outside the families."""
    source = (PACKAGE / path).read_text()
    for word in ("is_hopper", "planner_hopper", "consumer_warpgroups", "AUTO_PREFERS_HOPPER", "sm90_fwd import",
                 "sm80_fwd import", "HOPPER_FWD_PARAMS", "attn_fwd_hopper"):
        assert word not in source, f"{path} mentions {word}"
    tree = ast.parse(source)
    compared = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert not [c for c in compared if "roles" in c], compared


# ---- the backward families ------------------------------------------------------------------------


def test_backward_families_are_registered_fastest_path_first() -> None:
    from attngen.planning.planner_bwd import BackwardFamily, backward_families

    names = [f.name for f in backward_families()]
    assert names == ["sm90_bwd", "sm80_bwd"]
    for family in backward_families():
        assert isinstance(family, BackwardFamily) and family.direction is Direction.backward
        assert families.get(family.name) is family
        cover = family.coverage()
        assert cover.archs and cover.head_dims and cover.dtypes and cover.masks and cover.notes
    assert families.get("sm80_bwd").path == "mma.sync + cp.async, dQ by fp32 atomics (atomic-free when deterministic)"
    assert families.get("sm90_bwd").path.startswith("TMA + wgmma, dQ by bulk reductions into a tile-ordered")
    assert families.get("sm90_bwd").coverage().archs == ("sm90",)
    assert families.get("sm90_bwd").coverage().head_dims == (64, 128, 192, 256)


@pytest.mark.parametrize("arch", list(Arch), ids=[a.value for a in Arch])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("deterministic", [False, True])
def test_backward_plan_is_the_first_serving_family(arch: Arch, head_dim: int, deterministic: bool) -> None:
    from attngen.planning.planner_bwd import considered_bwd, plan_bwd

    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal", deterministic=deterministic)
    serving, refused = families.serving(spec, arch, Direction.backward)
    wgmma = arch is Arch.sm90 and head_dim in (64, 128, 192, 256)
    assert [f.name for f in serving] == (["sm90_bwd", "sm80_bwd"] if wgmma else ["sm80_bwd"])
    cover = families.get("sm90_bwd").coverage()
    assert (arch.value in cover.archs and head_dim in cover.head_dims) == wgmma
    try:
        p = plan_bwd(spec, arch)
    except PlanError:
        assert not wgmma
        return
    assert p.family == serving[0].name and p.summary()["family"] == p.family
    verdicts = dict(considered_bwd(spec, arch))
    assert list(verdicts) == ["sm90_bwd", "sm80_bwd"] and verdicts[p.family].startswith("chosen (")
    other = "sm80_bwd" if wgmma else "sm90_bwd"
    assert verdicts[other] == ("serves the spec, but sm90_bwd comes before it in FAMILIES' order" if wgmma
                               else refused["sm90_bwd"])


def test_sm90_backward_refusals_say_why() -> None:
    sm90 = families.get("sm90_bwd")
    spec = AttentionSpec(head_dim=128, dtype="bf16")
    assert sm90.serves(spec, Arch.sm90) is None
    assert sm90.serves(spec, Arch.sm100) == "sm100 has no wgmma"
    assert sm90.serves(spec.model_copy(update={"deterministic": True}), Arch.sm90) is None
    assert sm90.serves(AttentionSpec(head_dim=256, dtype="bf16", deterministic=True), Arch.sm90) is None
    assert sm90.serves(spec.model_copy(update={"head_dim": 256}), Arch.sm90) is None
    assert sm90.serves(spec.model_copy(update={"head_dim": 96}), Arch.sm90) == (
        "head_dim 96: not a multiple of 64 (the 128-byte TMA boxes), and dK and dV do not fit the consumer "
        "registers beside the scores")


def test_each_backward_family_renders_only_the_kernels_it_launches() -> None:
    from attngen.codegen.renderer import render
    from attngen.planning.planner_bwd import plan_bwd

    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    wgmma, mma = render(plan_bwd(spec, Arch.sm90)), render(plan_bwd(spec, Arch.sm80))
    assert wgmma.plan.family == "sm90_bwd" and mma.plan.family == "sm80_bwd"
    # causal, unmasked and deterministic: dQ by bulk reductions into the tile-ordered accumulator, then dq_convert
    # (sm90_bwd_rows.dq_red_serves)
    assert [e.rsplit("multistage_", 1)[1] for e in wgmma.entry_names] == ["preprocess", "dkdv_wgmma", "dq_convert"]
    red = render(plan_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="none"), Arch.sm90))
    assert [e.rsplit("multistage_", 1)[1] for e in red.entry_names] == ["preprocess", "dkdv_wgmma", "dq_convert"]
    ordered = render(plan_bwd(spec.model_copy(update={"deterministic": True}), Arch.sm90))
    assert [e.rsplit("multistage_", 1)[1] for e in ordered.entry_names] == ["preprocess", "dkdv_wgmma", "dq_convert"]
    # sm80_bwd: atomic dQ into the group-ordered accumulator, then dq_convert; deterministic: the dQ kernel
    assert [e.rsplit("multistage_", 1)[1] for e in mma.entry_names] == ["preprocess", "dkdv", "dq_convert"]
    mma_det = render(plan_bwd(spec.model_copy(update={"deterministic": True}), Arch.sm80))
    assert [e.rsplit("multistage_", 1)[1] for e in mma_det.entry_names] == ["preprocess", "dkdv", "dq"]
    assert "attngen::bwd_dq(" not in mma.code and "attngen::dq_convert(" not in mma_det.code
    for src in (wgmma, red, ordered, mma, mma_det):  # every entry point is defined, and no other
        defined = [line.split("(")[0] for line in src.code.splitlines() if line.startswith("attn_bwd_")]
        assert defined == list(src.entry_names)
    assert "wgmma" not in mma.code
    assert "attngen::bwd_dkdv(" not in wgmma.code and "attngen::bwd_dq(" not in wgmma.code


BACKWARD_GENERIC = ["planning/planner_bwd.py", "runtime/backward.py", "toolchain/builder.py"]


@pytest.mark.parametrize("path", BACKWARD_GENERIC)
def test_generic_backward_code_never_asks_which_family_it_holds(path: str) -> None:
    source = (PACKAGE / path).read_text()
    for word in (".hopper", "wgmma", "dq_atomic", "plan.dkdv", "plan.dq", "USE_ATOMIC_DQ", "USE_HOPPER_BWD",
                 "BWD_PARAMS"):
        assert word not in source, f"{path} mentions {word}"


def test_backward_modules_reach_into_no_forward_module() -> None:
    """Shared planning facts come from planning/shared.py; the launcher's arch from runtime/device.py."""
    for path in ("families/sm80_bwd.py", "families/sm90_bwd.py", "families/sm90_bwd_rows.py", "planning/planner_bwd.py",
                 "runtime/backward.py"):
        tree = ast.parse((PACKAGE / path).read_text())
        modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        bad = [m for m in modules if m.endswith(("planning.planner", "sm80_fwd", "sm90_fwd", "kernel"))]
        assert not bad, (path, bad)


def test_explain_names_the_backward_family_and_why_not_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from attngen.catalogue import catalogue_dir
    from attngen.cli import app

    monkeypatch.setenv("COLUMNS", "220")
    spec = str(catalogue_dir() / "causal_bf16_hd128.yaml")
    runner = CliRunner()
    data = json.loads(runner.invoke(app, ["explain", spec, "--arch", "sm90", "--json"]).stdout)["backward"]
    assert data["family"] == "sm90_bwd" and data["dkdv_wgmma"]["block_n"] == 128
    assert data["families"]["sm80_bwd"] == "serves the spec, but sm90_bwd comes before it in FAMILIES' order"
    text = runner.invoke(app, ["explain", spec, "--arch", "sm80"]).stdout
    assert "backward: family sm80_bwd" in text and "backward family sm90_bwd: sm80 has no wgmma" in text
    assert "dQ by fp32 atomics (5 GEMMs per tile pair against the atomic-free kernels' 7)" in " ".join(text.split())
