"""Generated mask expressions through the whole compiler front: a spec (or a clean SpecError), its plan, and the
NumPy interpreter of the kernel's tile schedule (loop bounds and the element-mask decision from the tile
classifier) against the float64 reference of the same expression."""

from __future__ import annotations

import random

import numpy as np
import pytest

import attngen
from attngen.errors import SpecError
from attngen.planning.planner import plan
from attngen.reference.interp import interpret
from attngen.spec.model import AttentionSpec

from .test_expr_gen import mask_source
from .test_interp import _with_tiles


@pytest.mark.parametrize("seed", range(80))
def test_generated_masks_run_the_schedule_exactly(seed: int) -> None:
    rng = random.Random(seed)
    source = mask_source(rng, depth=3)
    try:
        spec = AttentionSpec(head_dim=64, dtype="bf16", mask={"expr": source})
    except SpecError:
        return  # a clean refusal is an allowed outcome
    p = _with_tiles(plan(spec, "sm80"), 16, 16)
    npr = np.random.default_rng(seed)
    sq, sk = rng.choice([(37, 37), (20, 53), (53, 20)])
    q, k, v = (npr.standard_normal((1, n, 2, 64)) for n in (sq, sk, sk))
    out, lse = interpret(p, q, k, v)
    want_out, want_lse = attngen.reference(spec, q, k, v)
    np.testing.assert_allclose(out, want_out, atol=1e-10, err_msg=source)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse), err_msg=source)
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], atol=1e-10, err_msg=source)


def test_explain_reports_tile_shares(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from typer.testing import CliRunner

    from attngen.cli import app

    spec = tmp_path / "chunked.yaml"
    spec.write_text("head_dim: 128\ndtype: bf16\nmask: {kind: chunked, chunk: 2048}\narch: sm90\n")
    result = CliRunner().invoke(app, ["explain", str(spec), "--seqlen", "8192", "--json"])
    assert result.exit_code == 0, result.output
    tiles = json.loads(result.stdout)["tiles"]
    # Four chunks of 2048: a quarter of the causal triangle's tiles run, the rest are skipped.
    blocks = 8192 // tiles["block_m"], 8192 // tiles["block_n"]
    assert tiles["seqlen"] == 8192 and abs(tiles["empty"] + tiles["partial"] + tiles["full"] - 1) < 1e-9
    assert 0.85 < tiles["empty"] < 0.9 and tiles["partial"] > 0 and blocks[0] > 1
    text = CliRunner().invoke(app, ["explain", str(spec), "--seqlen", "8192"]).stdout
    assert "tiles at seqlen 8192" in text and "empty" in text


def test_name_and_hash_cover_the_canonical_expression() -> None:
    a = AttentionSpec(head_dim=64, dtype="bf16", mask={"expr": "kv_idx<=q_idx and (q_idx-kv_idx)<=8"})
    b = AttentionSpec(head_dim=64, dtype="bf16", mask={"expr": "kv_idx <= q_idx and q_idx - kv_idx <= 8"})
    c = AttentionSpec(head_dim=64, dtype="bf16", mask={"expr": "kv_idx <= q_idx and q_idx - kv_idx <= 9"})
    assert a.mask.expr == b.mask.expr and a.name == b.name and a.spec_hash() == b.spec_hash()
    assert c.name != a.name and c.spec_hash() != a.spec_hash()
    assert a.name.startswith("mask_") and a.name.endswith("_bf16_hd64")


def test_runtime_arguments_are_checked_by_name_dtype_shape_and_grad() -> None:
    torch = pytest.importorskip("torch")
    from attngen.features.variant import variant_of
    from attngen.runtime.variant_args import validate

    doc = {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}
    spec = AttentionSpec(head_dim=64, dtype="bf16", name="doc_sinks", sinks="learnable",
                         mask={"expr": "doc[b, q_idx] == doc[b, kv_idx]", "tensors": doc},
                         score_mod={"expr": "score * t", "scalars": {"t": {"dtype": "fp32"}}})
    args = variant_of(spec).arguments()
    q, k = torch.zeros(2, 5, 4, 64), torch.zeros(2, 5, 2, 64)
    good = {"doc": torch.zeros(2, 5, dtype=torch.int32), "sinks": torch.zeros(4), "t": 0.5}
    tensors, scalars = validate(args, q, k, good, spec.name)
    assert [tuple(t.shape) for t in tensors] == [(2, 5), (4,)] and scalars == [0.5]
    for change, message in [
        ({"doc": None}, "missing keyword argument 'doc'"),
        ({"extra": 1}, "unexpected keyword argument 'extra': spec 'doc_sinks' declares doc, sinks, t"),
        ({"doc": torch.zeros(2, 5)}, r"doc must be a torch.int32 tensor of shape \[2, 5\].*got dtype torch.float32"),
        ({"sinks": torch.zeros(2)}, r"sinks must be a torch.float32 tensor of shape \[4\].*got shape \[2\]"),
        ({"t": "x"}, "t must be a finite Python float"),
    ]:
        call = {**good, **change}
        call = {n: v for n, v in call.items() if v is not None}
        with pytest.raises(ValueError, match=message):
            validate(args, q, k, call, spec.name)
    # A float tensor other than sinks that requires grad is refused; sinks keep their autograd history.
    bias_spec = AttentionSpec(head_dim=64, dtype="bf16", score_mod={
        "expr": "score + w[h]", "tensors": {"w": {"dtype": "fp32", "shape": ["heads"]}}})
    with pytest.raises(ValueError, match="w requires grad, but attngen computes gradients for q, k, v and sinks"):
        validate(variant_of(bias_spec).arguments(), q, k, {"w": torch.zeros(4, requires_grad=True)}, "x")
    sinks = torch.zeros(4, requires_grad=True)
    tensors, _ = validate(args, q, k, {**good, "sinks": sinks}, spec.name)
    assert tensors[1].requires_grad


# --- loops step over empty tiles inside a run (masks with holes) ------------------------------------------------

def _preset(rng: random.Random) -> dict[str, object]:
    kind = rng.choice(["none", "causal", "sliding_window", "chunked", "prefix_lm"])
    if kind == "sliding_window":
        return {"kind": kind, "window": [rng.choice([0, 3, 17, 40]), rng.choice([-1, 0, 5, 33])]}
    if kind == "chunked":
        return {"kind": kind, "chunk": rng.choice([1, 7, 16, 50])}
    return {"kind": kind}


@pytest.mark.parametrize("seed", range(60))
def test_preset_masks_keep_every_row_and_column_of_tiles_in_one_run(seed: int) -> None:
    """The presets' loops step by one between the first and last live tile: no empty tile may sit inside."""
    from attngen.expr import TileClass
    from attngen.expr.interval import tensor_bounds_from_arrays
    from attngen.features.mask import mask_trait

    rng = random.Random(seed)
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask=_preset(rng))
    trait = mask_trait(spec)
    assert trait.contiguous
    sq, sk = rng.randint(1, 150), rng.randint(1, 150)
    bm, bn = rng.choice([8, 16, 32]), rng.choice([8, 16, 32])
    bounds = tensor_bounds_from_arrays({"prefix_len": np.array([rng.randint(0, sk + 5)], dtype=np.int32)})
    live = np.array([[trait.tile(m, n, bm, bn, sq, sk, {"b": 0, "h": 0}, bounds) is not TileClass.EMPTY
                      for n in range(-(-sk // bn))] for m in range(-(-sq // bm))])
    for line in [*live, *live.T]:
        hits = np.flatnonzero(line)
        if hits.size:
            assert line[hits[0]:hits[-1] + 1].all(), (spec.mask, sq, sk, bm, bn, line)


def test_streaming_walks_only_the_sink_and_window_tiles() -> None:
    """Streaming (4 sink tokens + a window of 1024) has empty tiles between the sinks and the window: the loops
    visit the sink block and the window's blocks only, forward (KV blocks) and backward (query blocks)."""
    from attngen.catalogue import load_catalogue
    from attngen.features.mask import mask_trait

    spec = next(s for s in load_catalogue() if s.name == "streaming_bf16_hd128")
    trait = mask_trait(spec)
    assert not trait.contiguous
    n = 8192
    order = trait.kv_block_order(100, 64, 64, n, n)
    assert order == [*range(100, 100 - 1024 // 64 - 1, -1), 0]   # rows 6400..6463 see keys from 5376 (block 84)
    column = trait.q_block_order(10, 64, 64, n, n)
    assert column == list(range(10, 10 + 1024 // 64 + 1))
    assert trait.q_block_order(0, 64, 64, n, n) == list(range(n // 64))   # the sink tokens' block: every query


def test_a_mask_with_holes_keeps_a_live_tile_bitmap_on_hopper() -> None:
    """The warp-specialized kernels of a mask with holes reserve the live-tile bitmap in the budget; presets do not."""
    from attngen.planning.planner_bwd import plan_bwd
    from attngen.planning.shared import SCHEDULE_WORDS

    streaming = {"expr": "kv_idx <= q_idx and (q_idx - kv_idx <= 64 or kv_idx < 4)"}
    for mask, words in ((streaming, SCHEDULE_WORDS), ("causal", 0)):
        spec = AttentionSpec(head_dim=128, dtype="bf16", mask=mask, pipeline="warp_specialized")
        fwd = plan(spec, "sm90")
        assert fwd.smem.schedule_words == words
        bwd = plan_bwd(spec, "sm90")
        assert bwd.dkdv_wgmma.schedule_words == words
        for kernel_plan in (fwd, bwd):
            text = attngen.render(kernel_plan).code
            assert f"kHoles = {'true' if words else 'false'}" in text
            assert f"kScheduleWords = {words};" in text
