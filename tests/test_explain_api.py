"""attngen.explain: the data `attngen explain` prints, for Python callers, and the same JSON as `explain --json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attngen
from attngen.cli import app
from attngen.errors import PlanError, SpecError

SPEC = attngen.AttentionSpec(name="api", head_dim=128, dtype="bf16", mask="causal", arch=["sm90"])


def test_explain_returns_the_plans_and_every_verdict() -> None:
    report = attngen.explain(SPEC, "sm90", seqlen=4096)
    assert isinstance(report, attngen.Explanation)
    assert report.plan == attngen.plan(SPEC, "sm90")
    assert report.plan.family in dict(report.families)
    assert report.backward["family"] and report.backward["kernels"]
    assert any("splits at batch 8" in line for line in report.decode["lines"])  # type: ignore[union-attr]
    assert report.tiles is not None and report.tiles["seqlen"] == 4096
    assert report.tiles["empty"] + report.tiles["partial"] + report.tiles["full"] == pytest.approx(1.0)
    assert attngen.explain(SPEC, "sm90").tiles is None


def test_explain_json_is_the_commands(tmp_path: Path) -> None:
    path = tmp_path / "api.yaml"
    path.write_text("name: api\nhead_dim: 128\ndtype: bf16\nmask: causal\narch: [sm90]\n")
    result = CliRunner().invoke(app, ["explain", str(path), "--arch", "sm90", "--json", "--seqlen", "2048"])
    assert result.exit_code == 0, result.stderr
    from_path = attngen.explain(path, "sm90", seqlen=2048).to_json()
    assert json.loads(result.stdout) == json.loads(json.dumps(from_path))
    assert from_path["tiles"]["seqlen"] == 2048  # type: ignore[index]


def test_explain_reports_what_an_arch_lacks_and_refuses_bad_arguments() -> None:
    fp8_sm80 = attngen.AttentionSpec(name="f", head_dim=128, dtype="fp8_e4m3")
    with pytest.raises(PlanError):
        attngen.explain(fp8_sm80, "sm80")        # no forward family serves fp8 on sm80
    sm90 = attngen.explain(attngen.AttentionSpec(name="f", head_dim=128, dtype="fp8_e4m3"), "sm90")
    assert "unavailable" in sm90.backward     # fp8 has no backward: the reason, not an error
    with pytest.raises(SpecError, match="sm99"):
        attngen.explain(SPEC, "sm99")
    with pytest.raises(ValueError, match="seqlen"):
        attngen.explain(SPEC, "sm90", seqlen=0)
    assert attngen.explain(SPEC).plan.arch.value == "sm90"     # the spec's first arch
    with pytest.raises(ValueError, match="names no arch: pass arch="):
        attngen.explain(attngen.AttentionSpec(name="n", head_dim=64, dtype="bf16"))
