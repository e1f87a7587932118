"""The YAML loader: files, malformed and hostile YAML, and the catalogue. Whatever the input, a SpecError
with the file and line comes out, or an AttentionSpec; nothing else."""

from __future__ import annotations

import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attngen.errors import SpecError
from attngen.spec.loader import MAX_SPEC_BYTES, load_spec, load_spec_text
from attngen.spec.model import HEAD_DIMS, Arch, AttentionSpec

SPECS = Path(__file__).resolve().parent.parent / "specs"
CATALOGUE = sorted(SPECS.glob("*.yaml"))
BASE = "head_dim: 128\ndtype: bf16\n"


# ---- files ---------------------------------------------------------------------------------------

def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as caught:
        load_spec(missing)
    assert caught.value.source == str(missing)
    assert str(caught.value) == f"{missing}: spec file not found"


def test_yaml_text_passed_as_a_path_gets_a_hint() -> None:
    with pytest.raises(SpecError, match="use load_spec_text"):
        load_spec(BASE)


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a directory") as caught:
        load_spec(tmp_path)
    assert caught.value.source == str(tmp_path)


def test_oversized_file_is_refused_before_parsing(spec_file: Callable[..., Path]) -> None:
    path = spec_file(BASE + "# padding\n" * (MAX_SPEC_BYTES // 10))
    start = time.perf_counter()
    with pytest.raises(SpecError, match=f"larger than {MAX_SPEC_BYTES} bytes") as caught:
        load_spec(path)
    assert time.perf_counter() - start < 0.5
    assert str(caught.value).startswith(f"{path}: ")


def test_non_utf8_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(BASE.encode() + "name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8") as caught:
        load_spec(path)
    assert (caught.value.source, caught.value.line) == (str(path), 3)


def test_path_like_and_str_paths_load_the_same(spec_file: Callable[..., Path]) -> None:
    path = spec_file(BASE + "mask: causal\n")
    assert load_spec(path) == load_spec(str(path)) == load_spec_text(path.read_text())


def test_mapping_and_spec_inputs() -> None:
    spec = load_spec({"head_dim": 64, "dtype": "fp16", "arch": "sm80"})
    assert spec.arch == (Arch.sm80,)
    assert load_spec(spec) is spec
    with pytest.raises(SpecError, match="expected a path to a YAML spec or a mapping, got int"):
        load_spec(5)  # type: ignore[arg-type]


def test_text_source_name_defaults_and_non_text_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text("head_dim: 128\n")
    assert str(caught.value).startswith("<string>:1: dtype: ")
    with pytest.raises(SpecError, match="expected YAML text, got bytes"):
        load_spec_text(BASE.encode())  # type: ignore[arg-type]


# ---- document shape and malformed YAML -------------------------------------------------------------

DOCUMENT_ERRORS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "empty": ("", 1, ("the spec is empty", "head_dim", "fp16, bf16")),
    "comment-only": ("# just a comment\n\n", 1, ("the spec is empty",)),
    "top-level-list": ("- head_dim: 128\n- dtype: bf16\n", 1, ("top level must be a mapping", "got a list")),
    "top-level-scalar": ("\n\nbf16\n", 3, ("top level must be a mapping", "the scalar 'bf16'")),
    "null-document": ("~\n", 1, ("top level must be a mapping", "the scalar '~'")),
    "unclosed-flow": ("head_dim: [128\ndtype: bf16\n", 2, ("malformed YAML", "flow sequence")),
    "bad-indent": ("head_dim: 128\n  dtype: bf16\n", 2, ("malformed YAML", "mapping values are not allowed")),
    "tab": ("head_dim: 128\n\tdtype: bf16\n", 2, ("malformed YAML", "'\\t'")),
    "unclosed-quote": ("head_dim: 128\nmask: 'causal\n", 3, ("malformed YAML", "quoted scalar")),
    "two-documents": (BASE + "---\nhead_dim: 64\n", 3, ("malformed YAML", "single document")),
    "nul-char": (BASE + "mask: causal\x00\n", 3, ("malformed YAML", "#x0000")),
    "deep-flow-mapping": (BASE + "tiles: " + "{a: " * 40, 3, ("nesting deeper than",)),
    "deep-flow-list": ("[" * 20000, 1, ("nesting deeper than",)),
}


@pytest.mark.parametrize(("text", "line", "needles"), list(DOCUMENT_ERRORS.values()), ids=list(DOCUMENT_ERRORS))
def test_document_errors(spec_error: Callable[..., SpecError], text: str, line: int,
                         needles: tuple[str, ...]) -> None:
    spec_error(text, line, None, *needles)


@pytest.mark.parametrize(("text", "line", "path", "needles"), [
    (BASE + "dtype: fp16\n", 3, "dtype", ("duplicate key 'dtype'", "first given on line 2")),
    (BASE + "pipeline:\n  kind: auto\n  kind: multistage\n", 5, "pipeline.kind", ("duplicate key 'kind'",)),
    ("yes: 1\n" + BASE, 1, None, ("keys must be plain names", "'yes'", "bool", "valid keys: name, head_dim")),
    (BASE + "1: x\n", 3, None, ("keys must be plain names", "'1'", "int")),
    (BASE + "pipeline:\n  ? [a]\n  : 1\n", 4, "pipeline", ("keys must be plain names, got a list",
                                                          "valid keys: kind, stages")),
    (BASE + "mask: !!python/object/apply:os.system [echo hi]\n", 3, "mask", ("YAML tag", "not allowed")),
    (BASE + "name: !!python/name:os.system\n", 3, "name", ("YAML tag", "not allowed")),
    (BASE + "mask: !custom causal\n", 3, "mask", ("YAML tag '!custom' is not allowed",)),
    (BASE + "tiles: !!set {a, b}\n", 3, "tiles", ("YAML tag", "set", "not allowed")),
    (BASE + "arch: !!omap [a: 1]\n", 3, "arch", ("YAML tag", "omap", "not allowed")),
    (BASE + "name: 2024-01-01\n", 3, "name", ("expected a string", "date")),
])
def test_structural_errors(spec_error: Callable[..., SpecError], text: str, line: int, path: str | None,
                           needles: tuple[str, ...]) -> None:
    spec_error(text, line, path, *needles)


# ---- hostile YAML ---------------------------------------------------------------------------------

def _billion_laughs(levels: int = 9) -> str:
    lines = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 9) + "]")
    return BASE + "\n".join(lines) + "\n"


def test_alias_bomb_fails_fast_without_eating_memory(spec_file: Callable[..., Path]) -> None:
    path = spec_file(_billion_laughs())
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(SpecError) as caught:
            load_spec(path)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 16 * 2**20
    err = caught.value
    assert (err.source, err.line) == (str(path), 3)
    assert "anchors and aliases" in str(err) and "not allowed" in str(err)


@pytest.mark.parametrize(("text", "line"), [
    (BASE + "mask: &m causal\n", 3),
    ("defaults: &d {head_dim: 128, dtype: bf16}\nspec:\n  <<: *d\n", 1),
    (BASE + "name: *undefined\n", 3),
])
def test_anchors_and_aliases_are_refused(spec_error: Callable[..., SpecError], text: str, line: int) -> None:
    spec_error(text, line, None, "anchors and aliases (&name, *name) are not allowed")


def test_largest_allowed_spec_parses_quickly() -> None:
    text = BASE + "".join(f"# comment line {i:05d} ......................\n" for i in range(1300))
    assert len(text) <= MAX_SPEC_BYTES
    start = time.perf_counter()
    assert load_spec_text(text).head_dim == 128
    assert time.perf_counter() - start < 1.0


# ---- the catalogue --------------------------------------------------------------------------------

def test_catalogue_has_the_promised_specs() -> None:
    stems = {p.stem for p in CATALOGUE}
    for dtype in ("fp16", "bf16"):
        for hd in (64, 128, 256):
            for mask in ("none", "causal"):
                assert f"{mask}_{dtype}_hd{hd}" in stems
    assert {"sliding_window_bf16_hd128", "causal_bf16_hd96", "causal_fp16_hd192",
            "none_bf16_hd192"} <= stems
    assert len(CATALOGUE) >= 14


@pytest.mark.parametrize("path", CATALOGUE, ids=[p.stem for p in CATALOGUE])
def test_catalogue_spec_loads_with_its_stem_as_name(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem
    assert spec.arch is None  # built for every arch
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and len(first) > 10


def test_catalogue_names_are_unique() -> None:
    names = [load_spec(p).name for p in CATALOGUE]
    assert len(names) == len(set(names))


def test_catalogue_sliding_window() -> None:
    spec = load_spec(SPECS / "sliding_window_bf16_hd128.yaml")
    assert spec.mask.window == (256, 0) and spec.window is None and (spec.window_left, spec.window_right) == (256, 0)


# ---- hypothesis: nothing but AttentionSpec or SpecError ---------------------------------------------

VALID_KEYS = list(AttentionSpec.model_fields) + ["kind", "stages", "block_m", "block_n", "num_warps"]
JUNK_KEYS = ["head_dimm", "dtyp", "masks", "Arch", "window_", "<<", "", " ", "1", "true", "null"]
WORDS = ["fp16", "bf16", "none", "causal", "sliding_window", "auto", "multistage", "warp_specialized",
         "pingpong", *(a.value for a in Arch), "sm75", "128", "yes", "~", "&a", "*a", "!!str"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.sampled_from([32, 64, 128, 256]), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=20), st.sampled_from(WORDS))
keys = st.one_of(st.sampled_from(VALID_KEYS + JUNK_KEYS), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
mappings = st.dictionaries(st.one_of(keys, st.integers(), st.booleans()), values, max_size=8)
valid_bases = st.fixed_dictionaries(
    {"head_dim": st.sampled_from(HEAD_DIMS), "dtype": st.sampled_from(["fp16", "bf16"])},
    optional={"mask": st.sampled_from(["none", "causal"]), "arch": st.sampled_from([a.value for a in Arch]),
              "pipeline": st.sampled_from(["auto", "multistage"]),
              "name": st.sampled_from(["k1", "attn.v2"])})


@st.composite
def near_valid_mappings(draw: st.DrawFn) -> dict[Any, Any]:
    """A valid spec with up to two entries replaced or added at random."""
    data: dict[Any, Any] = draw(valid_bases)
    for _ in range(draw(st.integers(0, 2))):
        data[draw(keys)] = draw(values)
    return data


def _only_spec_or_spec_error(text: str) -> None:
    try:
        spec = load_spec_text(text, source_name="fuzz.yaml")
    except SpecError as err:
        assert err.source == "fuzz.yaml" and str(err).startswith("fuzz.yaml")
        # YAML breaks lines at \r, \x85, \u2028 and \u2029 too, and reports lines as it counts them.
        yaml_lines = len(re.split("\r\n|[\r\n\x85\u2028\u2029]", text))
        assert err.line is None or 1 <= err.line <= yaml_lines + 1
        return
    assert isinstance(spec, AttentionSpec)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mappings, near_valid_mappings()), st.sampled_from([None, "flow", "block"]))
def test_arbitrary_mappings_give_a_spec_or_a_spec_error(data: dict[Any, Any], style: str | None) -> None:
    flow = {None: None, "flow": True, "block": False}[style]
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=flow, allow_unicode=True)
    _only_spec_or_spec_error(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("adehimt_:-[]{},&*!|>'\"#%@`?\t\n 0128")), max_size=80))
def test_arbitrary_text_gives_a_spec_or_a_spec_error(text: str) -> None:
    _only_spec_or_spec_error(text)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_unicode_after_a_valid_prefix(tail: str) -> None:
    _only_spec_or_spec_error(BASE + tail)
