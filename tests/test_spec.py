"""Spec validation: every field's failure points at its file, line and YAML path, with the allowed values;
valid specs over the whole space load and plan within their arch's budget."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from attngen.errors import PlanError, SpecError
from attngen.planning import search_space
from attngen.planning.archs import arch_info
from attngen.planning.ir import Tiling
from attngen.planning.planner import family_of, plan, resolve_pipeline
from attngen.spec.loader import load_spec, load_spec_text, spec_error_from_validation
from attngen.spec.model import (
    HEAD_DIMS,
    MAX_STAGES,
    MIN_STAGES,
    Arch,
    AttentionSpec,
    MaskKind,
    Pipeline,
    PipelineKind,
    Tiles,
)

from .plan_checks import assert_within_budget

BASE = "head_dim: 128\ndtype: bf16\n"
HD_ALLOWED = "allowed: 64, 96, 128, 192, 256"
ARCH_ALLOWED = "sm80, sm86, sm89, sm90, sm100, sm120"
BLOCK_M_TRIES = ("the multistage pipeline tries block_m 64 or 128; warp_specialized tries 128 or 192 (sm90 only); "
                 "pingpong tries 128 (sm90 only)")
BLOCK_N_TRIES = ("the multistage pipeline tries block_n 32, 64 or 128; warp_specialized and pingpong try 64 to 192 "
                 "in steps of 16, or 256 (sm90 only)")

#: (YAML text, line, YAML path, fragments the message must contain)
FIELD_ERRORS: list[tuple[str, int, str, tuple[str, ...]]] = [
    # unknown or misspelt keys
    ("head_dimm: 128\ndtype: bf16\n", 1, "head_dimm",
     ("unknown key 'head_dimm'", "did you mean 'head_dim'?")),
    ("head_dim: 128\ndtpye: bf16\n", 2, "dtpye", ("did you mean 'dtype'?",)),
    (BASE + "colour: red\n", 3, "colour",
     ("unknown key 'colour'", "valid keys: name, head_dim, dtype, mask")),
    (BASE + "pipeline:\n  kind: multistage\n  stagse: 3\n", 5, "pipeline.stagse",
     ("did you mean 'stages'?",)),
    (BASE + "tiles:\n  block_k: 64\n", 4, "tiles.block_k", ("unknown key 'block_k'", "did you mean")),
    # wrong types
    ("head_dim: \"128\"\ndtype: bf16\n", 1, "head_dim",
     ("expected an integer", "the string '128'", "without quotes", HD_ALLOWED)),
    ("head_dim: true\ndtype: bf16\n", 1, "head_dim", ("expected an integer", "the boolean true", HD_ALLOWED)),
    ("head_dim: 128.0\ndtype: bf16\n", 1, "head_dim", ("expected an integer", "the number 128.0")),
    ("head_dim: [128]\ndtype: bf16\n", 1, "head_dim", ("expected an integer", "a list")),
    ("head_dim: 128\ndtype: 16\n", 2, "dtype", ("the integer 16", "allowed: fp16, bf16")),
    (BASE + "name: 5\n", 3, "name", ("expected a string", "the integer 5")),
    (BASE + "tiles: big\n", 3, "tiles", ("expected a mapping", "block_m, block_n, num_warps")),
    (BASE + "pipeline: 5\n", 3, "pipeline", ("expected a mapping", "auto, multistage")),
    (BASE + "mask: sliding_window\nwindow: 5\n", 4, "window", ("expected a list", "[left, right]")),
    (BASE + "mask: sliding_window\nwindow: [left, 0]\n", 4, "window[0]", ("expected an integer",)),
    (BASE + "arch: 90\n", 3, "arch", ("expected a list", ARCH_ALLOWED)),
    # unsupported values
    ("head_dim: 100\ndtype: bf16\n", 1, "head_dim", ("head_dim 100 is not supported", HD_ALLOWED)),
    ("head_dim: 128\ndtype: fp32\n", 2, "dtype", ("'fp32' is not a valid dtype", "allowed: fp16, bf16")),
    ("head_dim: 128\ndtype: float16\n", 2, "dtype", ("allowed: fp16, bf16", "did you mean 'fp16'?")),
    (BASE + "mask: casual\n", 3, "mask",
     ("allowed: a preset (none, causal, sliding_window, chunked, prefix_lm)", "did you mean 'causal'?")),
    (BASE + "arch: sm75\n", 3, "arch", ("'sm75' is not a valid arch", ARCH_ALLOWED)),
    (BASE + "arch:\n  - sm80\n  - sm99\n", 5, "arch[1]", ("'sm99'", ARCH_ALLOWED)),
    (BASE + "arch: []\n", 3, "arch", ("empty arch list", ARCH_ALLOWED)),
    (BASE + "name: has space\n", 3, "name", ("not a valid name", "letters, digits")),
    # mask and window
    (BASE + "window: [1, 2]\n", 3, "window", ("applies only to mask 'sliding_window'",)),
    (BASE + "mask: sliding_window\n", 3, "mask", ("needs 'window: [left, right]'",)),
    (BASE + "mask: sliding_window\nwindow: [256, -5]\n", 4, "window[1]", ("-1 for unbounded", "[256, -5]")),
    (BASE + "mask: sliding_window\nwindow:\n  - 256\n  - -5\n", 6, "window[1]", ("-1 for unbounded",)),
    (BASE + "mask: sliding_window\nwindow: [256]\n", 4, "window[1]", ("too few items", "[left, right]")),
    (BASE + "mask: sliding_window\nwindow: [1, 2, 3]\n", 4, "window", ("expected 2 items, got 3",)),
    (BASE + "mask: sliding_window\nwindow: [-1, -1]\n", 4, "window", ("masks nothing", "mask: none")),
    # pipeline
    (BASE + "arch: sm80\npipeline: warp_specialized\n", 4, "pipeline", ("runs on sm90 only", "arch lists sm80")),
    (BASE + "arch: [sm90, sm100]\npipeline:\n  kind: pingpong\n", 4, "pipeline", ("runs on sm90 only", "sm100")),
    (BASE + "pipeline: fast\n", 3, "pipeline",
     ("'fast' is not a valid pipeline", "auto, multistage, warp_specialized, pingpong")),
    (BASE + "pipeline:\n  kind: auto\n  stages: 3\n", 5, "pipeline.stages",
     ("needs a named strategy",)),
    (BASE + "pipeline:\n  kind: multistage\n  stages: 7\n", 5, "pipeline.stages",
     ("the integer 7 is out of range", f"from {MIN_STAGES} to {MAX_STAGES}")),
    (BASE + "pipeline:\n  kind: multistage\n  stages: 1\n", 5, "pipeline.stages", ("out of range",)),
    (BASE + "pipeline:\n  kind: multistage\n  stages: '3'\n", 5, "pipeline.stages", ("expected an integer",)),
    (BASE.replace("128", "96") + "pipeline: {kind: pingpong, stages: 3}\n", 3, "pipeline",
     ("pipeline 'pingpong' needs a head_dim that is a multiple of 64", "head_dim 96 is not", "Remedy")),
    # tiles: the values some pipeline's search space holds, per field
    (BASE + "tiles:\n  block_m: 24\n", 4, "tiles.block_m", ("multiple of 16", "got 24", BLOCK_M_TRIES)),
    (BASE + "tiles:\n  block_n: 512\n", 4, "tiles.block_n", ("out of range", BLOCK_N_TRIES)),
    (BASE + "tiles:\n  num_warps: 3\n", 4, "tiles.num_warps",
     ("tiles.num_warps 3: the multistage pipeline tries num_warps 4 or 8; warp_specialized tries 12 or 16 "
      "(sm90 only); pingpong tries 12 (sm90 only); 3 is not among them", "Remedy")),
    (BASE + "tiles:\n  num_warps: 1\n", 4, "tiles.num_warps", ("tiles.num_warps 1: ", "1 is not among them")),
    (BASE + "tiles:\n  block_m: 256\n", 4, "tiles.block_m",
     (f"tiles.block_m 256: {BLOCK_M_TRIES}; 256 is not among them", "drop tiles.block_m")),
    (BASE + "tiles: {block_m: 256, block_n: 240}\n", 3, "tiles.block_m",
     ("tiles.block_m 256", "also (line 3, tiles.block_n): tiles.block_n 240: ", "240 is not among them")),
    # tiles: the combination, against the pipelines the spec may use
    (BASE + "tiles: {block_m: 64, num_warps: 8}\n", 3, "tiles",
     ("tiles {block_m: 64, num_warps: 8}: no pipeline tries these values together",
      "multistage tries block_m 64 with 4 warps or 128 with 4 or 8 warps, each with block_n 32, 64 or 128",
      "warp_specialized tries block_m 128 with 12 warps or 192 with 16 warps", "Remedy")),
    (BASE + "tiles: {block_m: 192, block_n: 32}\n", 3, "tiles", ("no pipeline tries these values together",)),
    (BASE + "pipeline: multistage\ntiles:\n  block_m: 192\n", 4, "tiles",
     ("tiles.block_m 192: the multistage pipeline tries block_m 64 or 128; 192 is not among them",
      "the spec names pipeline 'multistage'", "use pipeline 'warp_specialized' (sm90 only)")),
    (BASE + "pipeline: {kind: multistage, stages: 4}\ntiles: {block_m: 64, num_warps: 8}\n", 4, "tiles",
     ("multistage tries block_m 64 with 4 warps", "the spec names pipeline 'multistage'")),
    (BASE + "pipeline: pingpong\ntiles: {block_n: 32}\n", 4, "tiles",
     ("the pingpong pipeline tries block_n 64 to 192 in steps of 16, or 256 (sm90 only); 32 is not among them",
      "use pipeline 'multistage'")),
    (BASE + "pipeline: pingpong\ntiles: {num_warps: 16}\n", 4, "tiles",
     ("pingpong pipeline tries num_warps 12", "use pipeline 'warp_specialized'")),
    (BASE.replace("128", "96") + "tiles: {block_m: 192}\n", 3, "tiles",
     ("the multistage pipeline tries block_m 64 or 128; 192 is not among them",
      "warp_specialized and pingpong do not apply: head_dim 96 is not a multiple of 64")),
    (BASE + "arch: [sm80, sm89]\ntiles: {block_n: 160}\n", 4, "tiles",
     ("the multistage pipeline tries block_n 32, 64 or 128; 160 is not among them",
      "the spec's arch list (sm80, sm89) has no sm90")),
    # missing required fields: the line of the mapping they belong in
    ("head_dim: 128\n", 1, "dtype", ("required key 'dtype' is missing", "allowed: fp16, bf16")),
    ("# a spec\n\ndtype: bf16\n", 3, "head_dim", ("required key 'head_dim' is missing", HD_ALLOWED)),
]


@pytest.mark.parametrize(("text", "line", "path", "needles"), FIELD_ERRORS,
                         ids=[f"{i}-{case[2]}" for i, case in enumerate(FIELD_ERRORS)])
def test_field_error_points_at_field(spec_error: Callable[..., SpecError], text: str, line: int, path: str,
                                     needles: tuple[str, ...]) -> None:
    spec_error(text, line, path, *needles)


def test_misspelt_key_leads_the_missing_key_it_causes(spec_error: Callable[..., SpecError]) -> None:
    err = spec_error("dtype: bf16\nhead_dimm: 128\n", 2, "head_dimm", "did you mean 'head_dim'?")
    assert "required key 'head_dim' is missing" in str(err)  # listed after, as a consequence


def test_every_problem_is_listed_in_document_order(spec_error: Callable[..., SpecError]) -> None:
    err = spec_error("head_dim: 100\ndtype: fp32\nmask: casual\n", 1, "head_dim", "head_dim 100")
    message = str(err)
    assert "also (line 2, dtype)" in message and "also (line 3, mask)" in message
    assert message.index("line 2, dtype") < message.index("line 3, mask")


def test_bad_field_does_not_blame_the_derived_name(spec_error: Callable[..., SpecError]) -> None:
    err = spec_error("head_dim: 12 8\ndtype: bf16\n", 1, "head_dim", "expected an integer")
    assert "name" not in str(err)


@pytest.mark.parametrize(("text", "expected"), [
    (BASE, {"name": "none_bf16_hd128", "mask.kind": MaskKind.none, "arch": None}),
    (BASE + "arch: sm90\n", {"arch": (Arch.sm90,)}),
    (BASE + "arch: [sm80, sm120]\n", {"arch": (Arch.sm80, Arch.sm120)}),
    (BASE + "mask: sliding_window\nwindow: [-1, 0]\n", {"mask.window": (-1, 0), "window": None, "window_left": -1}),
    (BASE + "mask: causal\n", {"window_left": -1, "window_right": 0, "name": "causal_bf16_hd128"}),
    (BASE + "pipeline: multistage\n", {"pipeline.kind": PipelineKind.multistage, "pipeline.stages": None}),
    (BASE + "pipeline: {kind: multistage, stages: 4}\n", {"pipeline.stages": 4}),
    (BASE + "tiles: {block_m: 64}\n", {"tiles.block_m": 64, "tiles.block_n": None}),
    (BASE + "name: my-kernel.v2\n", {"name": "my-kernel.v2"}),
])
def test_valid_forms(text: str, expected: dict[str, Any]) -> None:
    spec = load_spec_text(text)
    for dotted, want in expected.items():
        value: Any = spec
        for part in dotted.split("."):
            value = getattr(value, part)
        assert value == want, dotted


def test_mapping_input_reports_the_path_without_a_file() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec({"head_dim": 128, "dtype": "bf16", "mask": "sliding_window", "window": [8, -3]})
    err = caught.value
    assert (err.source, err.line, err.path) == (None, None, "window[1]")
    assert str(err).startswith("window[1]: ")


def test_spec_error_from_validation_of_a_pydantic_error() -> None:
    with pytest.raises(ValidationError) as caught:
        AttentionSpec.pydantic_validate({"head_dim": 128, "dtype": "bf16",
                                         "pipeline": {"kind": "multistage", "stages": 9}})
    err = spec_error_from_validation(caught.value, source="model.py")
    assert isinstance(err, SpecError)
    assert err.path == "pipeline.stages" and err.source == "model.py" and err.line is None
    assert "out of range" in str(err) and "from 2 to 5" in str(err)


def test_spec_error_from_validation_uses_the_given_lines() -> None:
    with pytest.raises(ValidationError) as caught:
        AttentionSpec.pydantic_validate({"head_dim": 128, "dtype": "fp8"})
    err = spec_error_from_validation(caught.value, source="s.yaml", lines={"": 1, "head_dim": 1, "dtype": 7})
    assert str(err).startswith("s.yaml:7: dtype: ")


# ---- the Python API: SpecErrors in the loader's words, never pydantic's text ---------------------

@pytest.mark.parametrize(("make", "path", "message"), [
    (lambda: AttentionSpec(head_dim=100, dtype="bf16"), "head_dim",
     "head_dim: head_dim 100 is not supported; allowed: 64, 96, 128, 192, 256"),
    (lambda: AttentionSpec.model_validate({"head_dim": 100, "dtype": "bf16"}), "head_dim",
     "head_dim: head_dim 100 is not supported; allowed: 64, 96, 128, 192, 256"),
    (lambda: AttentionSpec(head_dim=128, dtype="fp32"), "dtype",
     "dtype: the string 'fp32' is not a valid dtype; allowed: fp16, bf16"),
    (lambda: AttentionSpec(head_dim=128, dtype="bf16", pipeline={"kind": "multistage", "stages": 9}),
     "pipeline.stages", "pipeline.stages: the integer 9 is out of range; allowed: an integer from 2 to 5"),
    (lambda: AttentionSpec(head_dim=128, dtype="bf16", tiles={"num_warps": 1}), "tiles.num_warps",
     "tiles.num_warps: tiles.num_warps 1: the multistage pipeline tries num_warps 4 or 8"),
    (lambda: AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_m": 64, "num_warps": 8}), "tiles",
     "tiles: tiles {block_m: 64, num_warps: 8}: no pipeline tries these values together"),
    (lambda: AttentionSpec(head_dim=128, dtype="bf16", colour="red"), "colour", "colour: unknown key 'colour'"),
    (lambda: Tiles(block_m=24), "tiles.block_m", "tiles.block_m: must be a multiple of 16, got 24; allowed: "),
    (lambda: Tiles.model_validate({"block_n": 512}), "tiles.block_n", "tiles.block_n: the integer 512 is out of"),
    (lambda: Pipeline(kind="fast"), "pipeline.kind", "pipeline.kind: the string 'fast' is not a valid pipeline kind"),
], ids=["init", "model_validate", "dtype", "stages", "num_warps", "tile-combination", "unknown-key", "Tiles",
        "Tiles.model_validate", "Pipeline"])
def test_python_api_errors_are_readable_spec_errors(make: Callable[[], object], path: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:  # a SpecError is a ValueError
        make()
    err = caught.value
    assert isinstance(err, SpecError) and not isinstance(err, ValidationError)
    assert err.path == path and str(err).startswith(message), str(err)
    assert "pydantic" not in str(err) and "https://" not in str(err)


def test_the_loader_keeps_its_lines_and_a_valid_python_spec_still_builds() -> None:
    err = None
    try:
        load_spec_text(BASE + "tiles:\n  block_n: 40\n", source_name="s.yaml")
    except SpecError as caught:
        err = caught
    assert err is not None and (err.line, err.path) == (4, "tiles.block_n")
    assert str(err).count("tiles.block_n:") == 1  # worded once, not a reworded SpecError inside another
    spec = AttentionSpec(head_dim=128, dtype="bf16", tiles=Tiles(block_m=128), pipeline=Pipeline(kind="auto"))
    assert spec == AttentionSpec.model_validate(spec.model_dump()) == load_spec_text(BASE + "tiles: {block_m: 128}\n")


# ---- arch names: one SpecError with the allowed values, wherever a string becomes an Arch ----------

def test_arch_accepts_any_case_and_refuses_others_with_the_allowed_values() -> None:
    assert Arch("SM90") is Arch.sm90 and Arch(" sm100 ") is Arch.sm100 and Arch(Arch.sm80) is Arch.sm80
    for bad in ("sm75", "90", 90, None):
        with pytest.raises(SpecError, match=f"arch {bad!r} is not supported; allowed: {ARCH_ALLOWED}"):
            Arch(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compute capability 7.5"):
        Arch.from_capability(7, 5)


@pytest.mark.parametrize("entry", ["build", "plan", "plan_bwd"])
def test_a_bad_arch_string_in_the_api_names_the_allowed_values(entry: str) -> None:
    import attngen
    from attngen.planning.planner_bwd import plan_bwd

    call = {"build": attngen.build, "plan": attngen.plan, "plan_bwd": plan_bwd}[entry]
    with pytest.raises(SpecError) as caught:
        call(AttentionSpec(head_dim=128, dtype="bf16"), "sm75")
    assert str(caught.value).startswith(f"arch 'sm75' is not supported; allowed: {ARCH_ALLOWED}")
    assert "is not a valid Arch" not in str(caught.value)


def test_the_yaml_arch_field_keeps_its_message(spec_error: Callable[..., SpecError]) -> None:
    err = spec_error(BASE + "arch: sm99\n", 3, "arch", "'sm99' is not a valid arch", ARCH_ALLOWED,
                     "did you mean 'sm90'?")
    assert "not supported" not in str(err)
    assert load_spec_text(BASE + "arch: SM90\n").arch == (Arch.sm90,)


# ---- tiles: what a spec accepts is what the planners enumerate -------------------------------------

PIPELINES = ["auto", "multistage", "warp_specialized", "pingpong"]
TILE_VALUES = {f: [None, *search_space.all_values(f)] for f in search_space.TILE_FIELDS}


def _tiles_of(tiling: Tiling) -> dict[str, int]:
    return {f: getattr(tiling, f) for f in search_space.TILE_FIELDS}


def _enumerated(spec: AttentionSpec, kind: PipelineKind) -> list[Tiling]:
    """The planners' own enumeration for `kind` (not the search-space data the spec checks against)."""
    return family_of(kind).enumerate_tilings(spec, kind)


def _pipelines_for(data: dict[str, Any]) -> list[PipelineKind]:
    """The pipelines a spec may plan with: the one it names, or for auto every one some arch it targets offers."""
    named = data["pipeline"] if isinstance(data["pipeline"], str) else data["pipeline"]["kind"]
    if named != "auto":
        return [PipelineKind(named)]
    arches = data.get("arch") or [a.value for a in Arch]
    hopper = data["head_dim"] % 64 == 0 and "sm90" in arches
    return [PipelineKind.multistage, *([PipelineKind.warp_specialized, PipelineKind.pingpong] if hopper else [])]


def _some_pipeline_enumerates(data: dict[str, Any]) -> bool:
    tiles = data.get("tiles") or {}
    base = AttentionSpec.model_validate({**data, "tiles": None})
    return any(all(_tiles_of(t)[f] == v for f, v in tiles.items())
               for kind in _pipelines_for(data) for t in _enumerated(base, kind))


def _considered(spec: AttentionSpec, arch: Arch) -> bool:
    """Whether planning `spec` on `arch` evaluates a tiling with the spec's tile overrides."""
    tiles = spec.tiles.model_dump(exclude_none=True) if spec.tiles else {}
    try:
        kind = resolve_pipeline(spec, arch)
    except PlanError:
        return False
    return any(all(_tiles_of(t)[f] == v for f, v in tiles.items()) for t in _enumerated(spec, kind))


def _plans(spec: AttentionSpec, arch: Arch) -> bool:
    try:
        plan(spec, arch)
    except PlanError as exc:
        assert str(exc).startswith(f"no tiling of spec '{spec.name}' fits the {arch.value} budget"), str(exc)
        return False
    return True


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_every_accepted_tiling_is_planned_on_an_arch_it_targets(head_dim: int, pipeline: str) -> None:
    """Over every combination of tile values: the spec accepts exactly what some pipeline it may use
    enumerates; an accepted one is planned, on some arch the spec can target, from a tiling with its
    values, and where no arch has the budget for it (hd256 with block_n 128, say) the refusal is that
    budget's arithmetic, never the search space."""
    if pipeline in ("warp_specialized", "pingpong") and head_dim % 64:
        pytest.skip("the Hopper pipelines serve head dims that are multiples of 64 (refused by the spec)")
    accepted = planned = wide = 0
    for values in itertools.product(*TILE_VALUES.values()):
        data = {"head_dim": head_dim, "dtype": "bf16", "pipeline": pipeline,
                "tiles": {f: v for f, v in zip(TILE_VALUES, values, strict=True) if v is not None}}
        try:
            spec = AttentionSpec.model_validate(data)
        except SpecError as err:
            assert err.path is not None and err.path.startswith("tiles"), str(err)
            assert not _some_pipeline_enumerates(data), str(err)
            continue
        assert _some_pipeline_enumerates(data), data
        accepted += 1
        arches = [a for a in Arch if _considered(spec, a)]
        assert arches, f"{data}: no arch considers these tiles"
        planned += any(_plans(spec, a) for a in arches)
        wide += spec.tiles is not None and spec.tiles.block_n == 256
    assert accepted and planned
    if head_dim in (64, 128) and pipeline in ("multistage", "pingpong"):
        # Only multistage's 128 x 128 with 4 warps spills everywhere, and bf16 hd128's block_n 256 needs 2 stages of
        # 128 KB (fp8's 8-bit tiles take it).
        assert planned == accepted - (pipeline == "multistage") - (wide if head_dim == 128 else 0)


def test_auto_on_sm90_takes_the_pipeline_whose_space_holds_the_tiles() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_n": 32})   # multistage only
    assert plan(spec, Arch.sm90).pipeline is PipelineKind.multistage
    spec = AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_m": 192})  # warp_specialized only
    assert plan(spec, Arch.sm90).pipeline is PipelineKind.warp_specialized
    spec = AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_n": 64})   # every pipeline: the measured one
    assert plan(spec, Arch.sm90).pipeline is PipelineKind.warp_specialized    # (MEASURED_TILES_BAND's)
    softcap = AttentionSpec(head_dim=128, dtype="bf16", tiles={"block_n": 64}, score_mod={"softcap": 30.0})
    assert plan(softcap, Arch.sm90).pipeline is PipelineKind.pingpong         # (MEASURED_TILES')
    assert plan(spec, Arch.sm80).pipeline is PipelineKind.multistage


# ---- hypothesis: the valid spec space plans within its budget ------------------------------------

TILE_SIZES = [16 * i for i in range(1, 17)]


@st.composite
def spec_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """Spec mappings valid but perhaps for their tiles (values from every pipeline's space and beyond)."""
    data: dict[str, Any] = {"head_dim": draw(st.sampled_from(HEAD_DIMS)),
                            "dtype": draw(st.sampled_from(["fp16", "bf16"]))}
    mask = draw(st.sampled_from(["none", "causal", "sliding_window", "chunked", "prefix_lm"]))
    data["mask"] = mask
    if mask == "chunked":
        data["mask"] = {"kind": "chunked", "chunk": draw(st.integers(1, 1 << 16))}
    if mask == "sliding_window":
        side = st.one_of(st.just(-1), st.integers(0, 1 << 20))
        data["window"] = draw(st.tuples(side, side).filter(lambda w: w != (-1, -1)).map(list))
    # The Hopper strategies refuse head dims that are not multiples of 64 and every arch but sm90
    # (test_field_error_points_at_field).
    kinds = ["multistage", "warp_specialized", "pingpong"] if data["head_dim"] % 64 == 0 else ["multistage"]
    data["pipeline"] = draw(st.one_of(
        st.sampled_from(["auto", {"kind": "auto"}, *kinds]),
        st.builds(lambda k, n: {"kind": k, "stages": n}, st.sampled_from(kinds), st.integers(MIN_STAGES, MAX_STAGES))))
    kind = data["pipeline"] if isinstance(data["pipeline"], str) else data["pipeline"]["kind"]
    if kind in ("warp_specialized", "pingpong"):
        data["arch"] = ["sm90"]
    else:
        archs = st.sampled_from([a.value for a in Arch])
        data["arch"] = draw(st.lists(archs, min_size=1, max_size=6, unique=True))
    tiles = draw(st.fixed_dictionaries({}, optional={
        "block_m": st.sampled_from([*search_space.all_values("block_m"), *TILE_SIZES]),
        "block_n": st.sampled_from([*search_space.all_values("block_n"), *TILE_SIZES]),
        "num_warps": st.sampled_from([*search_space.all_values("num_warps"), 1, 2])}))
    if tiles or draw(st.booleans()):
        data["tiles"] = tiles
    return data


def _check_plan(spec: AttentionSpec, arch: Arch) -> None:
    try:
        p = plan(spec, arch)
    except PlanError as exc:
        assert "Remedy" in str(exc)
        # An arch `auto` serves with a pipeline that does not try the tiles (block_m 192 on sm80); else the budget.
        outside = spec.pipeline.kind is PipelineKind.auto and arch is not Arch.sm90
        assert str(arch_info(arch).smem_per_block) in str(exc) or (outside and "search space" in str(exc))
        return
    assert p.arch is arch and p.spec == spec
    assert_within_budget(p)
    if spec.pipeline.kind is not PipelineKind.auto:
        assert p.pipeline is spec.pipeline.kind
    if spec.pipeline.stages is not None:
        assert p.stages == spec.pipeline.stages
    for field in ("block_m", "block_n", "num_warps"):
        want = getattr(spec.tiles, field, None) if spec.tiles else None
        assert want is None or getattr(p, field) == want


@settings(max_examples=150, deadline=None)
@given(spec_dicts())
def test_valid_specs_plan_within_budget_or_raise_plan_error(data: dict[str, Any]) -> None:
    try:
        spec = AttentionSpec.model_validate(data)
    except SpecError as err:
        # Refused only for tiles that no pipeline the spec may use enumerates.
        assert err.path is not None and err.path.startswith("tiles") and "Remedy" in str(err), str(err)
        assert not _some_pipeline_enumerates(data)
        return
    assert spec.arch
    assert _some_pipeline_enumerates(data)
    assert any(_considered(spec, arch) for arch in spec.arch)
    for arch in spec.arch:
        _check_plan(spec, arch)


@settings(max_examples=100, deadline=None)
@given(spec_dicts())
def test_valid_specs_round_trip_through_yaml(data: dict[str, Any]) -> None:
    try:
        spec = AttentionSpec.model_validate(data)
    except SpecError:
        with pytest.raises(SpecError):  # the YAML path refuses it too
            load_spec_text(yaml.safe_dump(data))
        return
    assert load_spec_text(yaml.safe_dump(data)) == spec
    assert load_spec_text(yaml.safe_dump(spec.model_dump(mode="json"))) == spec
