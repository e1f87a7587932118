"""Spec validation: every field's failure points at its file, line and YAML path, with the allowed values;
valid specs over the whole space load and plan within their arch's budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from attngen.archs import arch_info
from attngen.errors import PlanError, SpecError
from attngen.loader import load_spec, load_spec_text, spec_error_from_validation
from attngen.planner import plan
from attngen.spec import HEAD_DIMS, MAX_STAGES, MIN_STAGES, Arch, AttentionSpec, MaskKind, PipelineKind

from .plan_checks import assert_within_budget

BASE = "head_dim: 128\ndtype: bf16\n"
HD_ALLOWED = "allowed: 64, 96, 128, 192, 256"
ARCH_ALLOWED = "sm80, sm86, sm89, sm90, sm100, sm120"

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
    (BASE + "mask: casual\n", 3, "mask", ("allowed: none, causal, sliding_window", "did you mean 'causal'?")),
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
    # tiles
    (BASE + "tiles:\n  block_m: 24\n", 4, "tiles.block_m", ("multiple of 16", "got 24")),
    (BASE + "tiles:\n  block_n: 512\n", 4, "tiles.block_n",
     ("out of range", "multiples of 16 from 16 to 256")),
    (BASE + "tiles:\n  num_warps: 3\n", 4, "tiles.num_warps", ("1, 2, 4, 8, 12, 16", "got 3")),
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
    (BASE, {"name": "none_bf16_hd128", "mask": MaskKind.none, "arch": None}),
    (BASE + "arch: sm90\n", {"arch": (Arch.sm90,)}),
    (BASE + "arch: [sm80, sm120]\n", {"arch": (Arch.sm80, Arch.sm120)}),
    (BASE + "mask: sliding_window\nwindow: [-1, 0]\n", {"window": (-1, 0), "window_left": -1}),
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


def test_spec_error_from_validation_of_the_python_api() -> None:
    with pytest.raises(ValidationError) as caught:
        AttentionSpec(head_dim=128, dtype="bf16", pipeline={"kind": "multistage", "stages": 9})
    err = spec_error_from_validation(caught.value, source="model.py")
    assert isinstance(err, SpecError)
    assert err.path == "pipeline.stages" and err.source == "model.py" and err.line is None
    assert "out of range" in str(err) and "from 2 to 5" in str(err)


def test_spec_error_from_validation_uses_the_given_lines() -> None:
    with pytest.raises(ValidationError) as caught:
        AttentionSpec.model_validate({"head_dim": 128, "dtype": "fp8"})
    err = spec_error_from_validation(caught.value, source="s.yaml", lines={"": 1, "head_dim": 1, "dtype": 7})
    assert str(err).startswith("s.yaml:7: dtype: ")


# ---- hypothesis: the valid spec space plans within its budget ------------------------------------

TILE_SIZES = [16 * i for i in range(1, 17)]


@st.composite
def spec_dicts(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {"head_dim": draw(st.sampled_from(HEAD_DIMS)),
                            "dtype": draw(st.sampled_from(["fp16", "bf16"]))}
    mask = draw(st.sampled_from([m.value for m in MaskKind]))
    data["mask"] = mask
    if mask == "sliding_window":
        side = st.one_of(st.just(-1), st.integers(0, 1 << 20))
        data["window"] = draw(st.tuples(side, side).filter(lambda w: w != (-1, -1)).map(list))
    kinds = ["multistage", "warp_specialized", "pingpong"]
    data["pipeline"] = draw(st.one_of(
        st.sampled_from(["auto", {"kind": "auto"}, *kinds]),
        st.builds(lambda k, n: {"kind": k, "stages": n}, st.sampled_from(kinds), st.integers(MIN_STAGES, MAX_STAGES))))
    kind = data["pipeline"] if isinstance(data["pipeline"], str) else data["pipeline"]["kind"]
    if kind in ("warp_specialized", "pingpong"):
        data["arch"] = ["sm90"]  # the Hopper strategies refuse every other arch (test_field_error_points_at_field)
    else:
        archs = st.sampled_from([a.value for a in Arch])
        data["arch"] = draw(st.lists(archs, min_size=1, max_size=6, unique=True))
    tiles = draw(st.fixed_dictionaries({}, optional={
        "block_m": st.sampled_from([64, 128, *TILE_SIZES]),
        "block_n": st.sampled_from([32, 64, 128, *TILE_SIZES]),
        "num_warps": st.sampled_from([4, 8, 1, 2, 12, 16])}))
    if tiles or draw(st.booleans()):
        data["tiles"] = tiles
    return data


def _check_plan(spec: AttentionSpec, arch: Arch) -> None:
    try:
        p = plan(spec, arch)
    except PlanError as exc:
        assert "Remedy" in str(exc)
        assert str(arch_info(arch).smem_per_block) in str(exc) or "multiple of 64" in str(exc)
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
    spec = AttentionSpec.model_validate(data)
    assert spec.arch
    for arch in spec.arch:
        _check_plan(spec, arch)


@settings(max_examples=100, deadline=None)
@given(spec_dicts())
def test_valid_specs_round_trip_through_yaml(data: dict[str, Any]) -> None:
    spec = AttentionSpec.model_validate(data)
    assert load_spec_text(yaml.safe_dump(data)) == spec
    assert load_spec_text(yaml.safe_dump(spec.model_dump(mode="json"))) == spec
