"""Generated mask expressions through the whole compiler front: a spec (or a clean SpecError), its plan, and the
NumPy interpreter of the kernel's tile schedule (loop bounds and the element-mask decision from the tile
classifier) against the float64 reference of the same expression."""

from __future__ import annotations

import random

import numpy as np
import pytest

import attngen
from attngen.errors import SpecError
from attngen.planning.ir import KernelPlan, MultistageTiling
from attngen.planning.planner import plan
from attngen.reference.interp import interpret
from attngen.spec.model import AttentionSpec

from .test_expr_gen import mask_source


def _with_tiles(p: KernelPlan, block_m: int, block_n: int) -> KernelPlan:
    tiling = p.tiling
    assert isinstance(tiling, MultistageTiling)
    warp_m_tiles = block_m // (16 * tiling.num_warps) or 1
    return p.model_copy(update={"tiling": tiling.model_copy(update={"block_m": block_m, "block_n": block_n,
                                                                      "num_warps": block_m // (16 * warp_m_tiles),
                                                                      "warp_m_tiles": warp_m_tiles})})


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
