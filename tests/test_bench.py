"""The benchmark's CPU side: settings grid, FLOP / compulsory-byte / roofline arithmetic, the float64 reference,
the check-then-time logic, the report writers, the command line. The GPU side runs on the GPU itself
(`python -m attngen.bench --quick`); nothing here stands in for it.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from attngen.bench import measure, model, output, peers, report, runner
from attngen.bench.model import Config
from attngen.cli import app
from attngen.planning.planner import plan
from attngen.spec.model import AttentionSpec

REPO = Path(__file__).resolve().parent.parent
CEILINGS = {"matmul_n": 8192, "matmul_dtype": "bf16", "matmul_tflops": 700.0, "copy_gbps": 3000.0}


# ---- settings and arithmetic ------------------------------------------------------------------


def test_full_grid_is_the_fa3_paper_settings() -> None:
    configs = model.grid(model.HEAD_DIMS, None, (False, True))
    assert len(configs) == 3 * 6 * 2
    assert {c.seqlen for c in configs} == {512, 1024, 2048, 4096, 8192, 16384}
    for c in configs:
        assert c.batch * c.seqlen == 16384
        assert c.heads * c.head_dim == 2048


def test_quick_grid() -> None:
    configs = model.grid(model.HEAD_DIMS, None, (False, True), quick=True)
    got = {(c.head_dim, c.seqlen, c.causal) for c in configs}
    want = {(d, s, c) for d, ss in {64: (2048, 8192), 128: (2048, 8192, 16384), 256: (2048, 8192)}.items()
            for s in ss for c in (False, True)}
    assert got == want and len(configs) == 14
    # grouped by (head_dim, causal): one attngen compile per group, seqlens ascending within it
    assert model.group_keys(configs) == [(64, False), (64, True), (128, False), (128, True), (256, False),
                                         (256, True)]
    assert [c.seqlen for c in configs if (c.head_dim, c.causal) == (128, True)] == [2048, 8192, 16384]


def test_explicit_seqlens_override_quick() -> None:
    configs = model.grid((128,), (4096, 1024), (True,), quick=True)
    assert [(c.head_dim, c.seqlen, c.causal) for c in configs] == [(128, 1024, True), (128, 4096, True)]


def test_flops() -> None:
    c = Config(128, 8192, False)
    assert (c.batch, c.heads) == (2, 16)
    assert c.flops == 4 * 2 * 16 * 8192 * 8192 * 128
    assert Config(128, 8192, True).flops == c.flops / 2
    assert model.attention_flops(1, 1, 3, 5, 7, False) == 4 * 3 * 5 * 7


def test_compulsory_bytes_by_hand() -> None:
    # 2 x 4 heads, s 1000, d 64: Q, K and V read once and O written once, whatever the tiles or the mask.
    assert model.compulsory_bytes(2, 4, 1000, 64) == 8 * 4 * 1000 * 64 * 2


def test_roofline_and_throughput() -> None:
    bound, by = model.roofline_us(700e12, 1.0, 700.0, 3000.0)
    assert by == "compute" and bound == pytest.approx(1e6)
    bound, by = model.roofline_us(1.0, 3e12, 700.0, 3000.0)
    assert by == "memory" and bound == pytest.approx(1e6)
    assert model.tflops(2e12, 4.0) == pytest.approx(500.0)


def test_ratio() -> None:
    assert model.ratio(350.0, 300.0) == pytest.approx(350 / 300)
    assert model.ratio(None, 300.0) is None
    assert model.ratio(350.0, None) is None
    assert model.ratio(350.0, 0.0) is None
    assert model.ratio(math.nan, 1.0) is None


def test_model_row() -> None:
    cfg = Config(128, 8192, True)
    summary = plan(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), "sm90").summary()
    row = model.model_row(cfg, summary, 2.0, CEILINGS)
    io = model.compulsory_bytes(2, 16, 8192, 128)
    bound = max(cfg.flops / 700e12, io / 3000e9) * 1e6
    assert row["io_bytes"] == io and row["bound_us"] == pytest.approx(bound) and row["bound_by"] == "compute"
    assert row["measured_us"] == 2000.0
    assert row["achieved_fraction"] == pytest.approx(bound / 2000.0)
    # The plan's query blocks fill their waves of 132 SMs at the reference shape (batch 1 x 16 heads at 4096) and at
    # cfg's (batch 2 x 16 heads at 8192): the prediction scales by the FLOP ratio and the two fills.
    def fill(blocks: int) -> float:
        return blocks / (math.ceil(blocks / 132) * 132)

    block_m = summary["block_m"]
    scaled = summary["cost"]["predicted_us"] * cfg.flops / summary["cost"]["flops"]
    assert summary["cost"]["tile_efficiency"] == round(fill(math.ceil(4096 / block_m) * 16), 4)
    assert row["predicted_us_scaled"] == pytest.approx(
        scaled * summary["cost"]["tile_efficiency"] / fill(math.ceil(8192 / block_m) * 32))
    assert row["measured_over_predicted"] == pytest.approx(2000.0 / row["predicted_us_scaled"])
    assert model.model_row(cfg, summary, None, CEILINGS)["achieved_fraction"] is None


def test_forward_prediction_takes_the_waves_of_the_rows_shape() -> None:
    """hd64's 192-row blocks fill 704 / 792 of their waves at the reference shape (batch 1, seqlen 4096, 32 heads)
    and 2752 / 2772 at 8k x batch 2: the row's prediction is the FLOP-scaled one times 0.889 / 0.993."""
    summary = plan(AttentionSpec(head_dim=64, dtype="bf16"), "sm90").summary()
    cost = summary["cost"]
    assert summary["block_m"] == 192 and cost["tile_efficiency"] == round(704 / 792, 4)
    cfg = Config(64, 8192, False)
    flop_scaled = model.scaled_prediction(cost, cfg.flops)
    assert flop_scaled is not None
    assert model.forward_prediction(cfg, summary) == pytest.approx(flop_scaled * cost["tile_efficiency"] * 2772 / 2752)


#: The points the sm90 forward model was calibrated on (benchmarks/NOTES.md, issue 13 part 6, continued: the model_1
#: run), hd64 and hd128, 2k and 8k, unmasked and causal, read from the newest committed H100 run of today's plans
#: (hd64's tiles changed since model_1: NOTES.md, "hd64's forward").
MODEL_1 = REPO / "benchmarks" / "results" / "h100" / "fwd64_band" / "peers_after" / "fwd" / "bench.json"


def _model_1_rows() -> list[tuple[Config, dict[str, Any], dict[str, Any]]]:
    """(config, today's model row, the committed row) of each calibration point, from today's plans."""
    run = json.loads(MODEL_1.read_text())
    out = []
    for r in run["results"]:
        if r["head_dim"] not in (64, 128) or r["seqlen"] not in (2048, 8192):
            continue
        cfg = Config(r["head_dim"], r["seqlen"], r["causal"])
        # The tiles the run measured ("128x128 w12 s2 pingpong overlap"), which a later table may no longer choose.
        tiles, _, stages, pipeline, *_ = r["model"]["tiling"].split()
        block_m, block_n = map(int, tiles.split("x"))
        spec = AttentionSpec(head_dim=cfg.head_dim, dtype="bf16", mask="causal" if cfg.causal else "none",
                             pipeline={"kind": pipeline, "stages": int(stages[1:])},
                             tiles={"block_m": block_m, "block_n": block_n})
        row = model.model_row(cfg, plan(spec, "sm90").summary(), r["impls"]["attngen"]["ms"], run["ceilings"])
        out.append((cfg, row, r))
    return out


def test_the_sm90_forward_model_reproduces_the_model_1_rows() -> None:
    """Measured over predicted within 0.85-1.20 at every calibration point of the H100 run (it was 0.83-1.76 before:
    the products at the datasheet rate, no per-block clocks, no causal slowdown), on the tiles the run measured. With
    the causal slowdown recalibrated on the H200's run of today's kernels (next test) its hd64 2k causal row reads
    1.17, the rest 0.91-1.11."""
    rows = _model_1_rows()
    assert {(c.head_dim, c.seqlen, c.causal) for c, _, _ in rows} == {
        (d, s, c) for d in (64, 128) for s in (2048, 8192) for c in (False, True)}
    for cfg, row, committed in rows:
        assert row["tiling"] == committed["model"]["tiling"], cfg.label  # the plans the run measured
        assert 0.85 <= row["measured_over_predicted"] <= 1.20, (cfg.label, row["measured_over_predicted"])


#: The H200's forward bench of today's plans (hd64 / 128 / 256 at 2k / 8k / 16k, both masks; its README).
MODEL_H200 = REPO / "benchmarks" / "results" / "h200" / "model_1" / "fwd" / "bench.json"


def test_the_sm90_forward_model_against_the_h200_run() -> None:
    """On the H200 (today's plans, the tiles that run measured) measured over predicted is 0.74-1.03: the model is
    pessimistic by ~13% at long sequences, in the terms the ranking shares (NOTES.md, "model_1"). The causal rows carry
    no bias of their own (sm90_fwd_cost.PARTIAL_MASK_SLOWDOWN): their geometric mean is within 3% of the unmasked
    rows' (with the H100's 1.13 it was 6% below)."""
    run = json.loads(MODEL_H200.read_text())
    ratios: dict[bool, list[float]] = {False: [], True: []}
    for r in run["results"]:
        cfg = Config(r["head_dim"], r["seqlen"], r["causal"])
        summary = plan(AttentionSpec(head_dim=cfg.head_dim, dtype="bf16", mask="causal" if cfg.causal else "none"),
                       "sm90").summary()
        row = model.model_row(cfg, summary, r["impls"]["attngen"]["ms"], run["ceilings"])
        assert row["tiling"] == r["model"]["tiling"], cfg.label
        assert 0.74 <= row["measured_over_predicted"] <= 1.03, (cfg.label, row["measured_over_predicted"])
        ratios[cfg.causal].append(row["measured_over_predicted"])
    assert len(ratios[False]) == len(ratios[True]) == 9
    means = [math.exp(sum(map(math.log, v)) / len(v)) for v in ratios.values()]
    assert abs(means[1] / means[0] - 1) < 0.03, means


def test_of_bound_is_at_most_one_at_the_model_1_rows() -> None:
    """The roofline over compulsory bytes is a lower bound on time: no measurement beats it (the per-block IO model
    it replaced read 1.33-1.59 at hd128 in this run)."""
    for cfg, row, _ in _model_1_rows():
        assert 0 < row["achieved_fraction"] <= 1, (cfg.label, row["achieved_fraction"])
        assert row["bound_by"] == "compute"


def test_the_sm90_backward_model_against_the_h200_run() -> None:
    """On the H200's backward bench (results/h200/model_1/bwd) measured over predicted is 0.82-1.17 for the default
    plans and 0.82-1.13 for the deterministic ones at hd64-256, 2k-16k; each head dim's deterministic rows average
    within 4% of its default rows (sm90_bwd_cost.ORDERED_DQ_SLOWDOWN: hd64's 1.2 read 11% low)."""
    from attngen.planning.planner_bwd import plan_bwd

    run = json.loads((REPO / "benchmarks" / "results" / "h200" / "model_1" / "bwd" / "bwd.json").read_text())
    ratios: dict[tuple[int, bool], list[float]] = {}
    for r in run["rows"]:
        cfg = Config(r["head_dim"], r["seqlen"], r["causal"])
        for kind, det in (("attngen", False), ("attngen_deterministic", True)):
            spec = AttentionSpec(head_dim=cfg.head_dim, dtype="bf16", mask="causal" if cfg.causal else "none",
                                 deterministic=det)
            row = model.backward_model_row(cfg, plan_bwd(spec, "sm90").summary(), r[kind]["model"]["measured_us"] / 1e3)
            assert 0.8 <= row["measured_over_predicted"] <= 1.2, (cfg.label, kind, row["measured_over_predicted"])
            ratios.setdefault((cfg.head_dim, det), []).append(row["measured_over_predicted"])
    assert {d for d, _ in ratios} == {64, 128, 192, 256}
    for d in (64, 128, 192, 256):
        means = [math.exp(sum(map(math.log, ratios[(d, det)])) / len(ratios[(d, det)])) for det in (False, True)]
        assert abs(means[1] / means[0] - 1) < 0.04, (d, means)


#: Two H100 runs of the fp8 forward (benchmarks/fp8_forward.py; `fp8_kernel_tflops`: V's transpose subtracted), with
#: the plans of today (hd128 192 x 128 in three consumer warpgroups, hd256 ping-pong 128 x 128: the run's README).
FP8_RUNS = [REPO / "benchmarks" / "results" / "h100" / "fp8_tiles" / "fwd_refresh" / "fp8" / f"bench_{i}.json"
            for i in (1, 2)]


def test_the_sm90_forward_model_prices_fp8_products_at_the_8_bit_ceiling() -> None:
    """The fp8 kernels' times are 0.70-1.10 of the model's (0.49-0.67 when it priced 8-bit products at the 16-bit
    ceiling) at 2k-16k, hd128 and hd256, but eager 2k causal calls, which the host bounds (NOTES.md: "the 2k causal
    points are the host's"; this run read hd256 2k causal at 536 and 796 TFLOP/s)."""
    ratios = []
    for path in FP8_RUNS:
        for s in json.loads(path.read_text())["speed"]:
            cfg = Config(s["head_dim"], s["seqlen"], s["causal"])
            if cfg.seqlen == 2048 and cfg.causal:
                continue
            summary = plan(AttentionSpec(head_dim=cfg.head_dim, dtype="fp8_e4m3",
                                         mask="causal" if cfg.causal else "none"), "sm90").summary()
            assert (summary["block_m"], summary["block_n"]) == {128: (192, 128), 256: (128, 128)}[cfg.head_dim]
            predicted = model.forward_prediction(cfg, summary)
            assert predicted is not None
            ratios.append((cfg.label, cfg.flops / s["fp8_kernel_tflops"] / 1e6 / predicted))
    assert len(ratios) == 20
    for label, ratio in ratios:
        assert 0.7 <= ratio <= 1.1, (label, ratio)


@pytest.mark.parametrize("name, slug", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                        ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
                                        ("", "gpu")])
def test_gpu_slug(name: str, slug: str) -> None:
    assert model.gpu_slug(name) == slug


def test_parsers() -> None:
    assert model.parse_ints("64, 128,64") == (64, 128)
    assert model.parse_ints("512,2k,16K", model.parse_seqlen) == (512, 2048, 16384)
    assert model.parse_causal("both") == (False, True) and model.parse_causal("yes") == (True,)
    assert model.parse_peers("flash,flex") == ("flash", "flex") and model.parse_peers("none") == ()
    for bad in (lambda: model.parse_causal("maybe"), lambda: model.parse_peers("fa3"),
                lambda: model.parse_ints(""), lambda: model.parse_seqlen("0")):
        with pytest.raises(ValueError):
            bad()


# ---- the reference and the check-then-time logic (CPU tensors) --------------------------------


def _naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    q, k, v = (t[0, :, :2].double().transpose(0, 1) for t in (q, k, v))
    s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return (torch.softmax(s, -1) @ v).transpose(0, 1)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_slice_in_chunks(causal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = (torch.randn(2, 50, 3, 32, dtype=torch.bfloat16) for _ in range(3))
    monkeypatch.setattr(measure, "REF_CHUNK_BYTES", 8 * 2 * 50 * 7)  # 7 query rows per chunk
    ref = measure.reference_slice(q, k, v, causal)
    assert ref.shape == (50, 2, 32) and ref.dtype == torch.float64
    assert torch.allclose(ref, _naive(q, k, v, causal), atol=1e-12)
    assert measure.relative_error(ref.float(), ref) < 1e-6
    assert measure.relative_error(torch.full_like(ref, math.nan), ref) == math.inf


class _Fake:
    def __init__(self, name: str, make: Any) -> None:
        self.name, self.make = name, make

    def prepare(self, cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        return self.make(cfg, q, k, v)


def _exact(cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
    out = torch.zeros(q.shape, dtype=torch.float64)
    out[0, :, :2] = _naive(q, k, v, cfg.causal)
    return lambda: out.to(q.dtype)


def _raise_with_warning(cfg: Config, *qkv: torch.Tensor) -> Any:
    import warnings

    warnings.warn("Flash attention requires something", UserWarning, stacklevel=1)
    raise RuntimeError("No available kernel. Aborting execution.")


def _unfused(cfg: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
    import warnings

    exact = _exact(cfg, q, k, v)

    def forward() -> torch.Tensor:
        warnings.warn("flex_attention called without torch.compile() - this will use an unfused implementation",
                      UserWarning, stacklevel=1)
        return exact()

    return forward


def _unavailable(cfg: Config, *qkv: torch.Tensor) -> Any:
    raise peers.Unavailable("this torch has no SDPBackend.NOPE")


@pytest.fixture
def cpu_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the GPU-side loop on CPU tensors: no synchronize, a fixed timing, CPU inputs."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(measure, "time_ms", lambda fn: (fn(), 2.0)[1])

    def inputs(cfg: Config, dtype: str, seed: int) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(seed)
        shape = (1, 24, 2, cfg.head_dim)
        return tuple(torch.randn(shape, generator=gen, dtype=torch.bfloat16) for _ in range(3))

    monkeypatch.setattr(measure, "make_inputs", inputs)


def test_measure_impl_outcomes(cpu_gpu: None) -> None:
    cfg = Config(64, 2048, True)
    q, k, v = measure.make_inputs(cfg, "bf16", 0)
    ref = measure.reference_slice(q, k, v, True)
    ok = runner.measure_impl(_Fake("good", _exact), cfg, (q, k, v), ref, 2e-2)
    assert ok["status"] == "ok" and ok["ms"] == 2.0 and ok["tflops"] == pytest.approx(cfg.flops / 2e-3 / 1e12)
    assert ok["rel_err"] < 2e-2
    wrong = runner.measure_impl(_Fake("wrong", lambda *a: (lambda: a[1] * 0 + 1)), cfg, (q, k, v), ref, 2e-2)
    assert wrong["status"] == "failed" and wrong["rel_err"] > 2e-2 and "ms" not in wrong
    broken = runner.measure_impl(_Fake("broken", _raise_with_warning), cfg, (q, k, v), ref, 2e-2)
    assert broken["status"] == "failed"
    assert "No available kernel" in broken["error"] and "Flash attention requires" in broken["error"]
    unfused = runner.measure_impl(_Fake("flex", _unfused), cfg, (q, k, v), ref, 2e-2)
    assert unfused["status"] == "failed" and "unfused" in unfused["error"]
    missing = runner.measure_impl(_Fake("nope", _unavailable), cfg, (q, k, v), ref, 2e-2)
    assert missing == {"status": "unavailable", "error": "this torch has no SDPBackend.NOPE"}


def test_run_end_to_end_on_fakes(cpu_gpu: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(measure, "environment", lambda: {"gpu": "NVIDIA H100 80GB HBM3", "date": "today"})
    monkeypatch.setattr(measure, "ceilings", lambda dtype: dict(CEILINGS))

    def compile_fake(head_dim: int, causal: bool, dtype: str) -> tuple[Any, dict[str, Any]]:
        if head_dim == 256:
            raise RuntimeError("NVRTC said no")
        spec = AttentionSpec(head_dim=head_dim, dtype=dtype, mask="causal" if causal else "none")
        kernel = lambda q, k, v: _exact(Config(head_dim, 0, causal), q, k, v)()  # noqa: E731
        return kernel, {"head_dim": head_dim, "causal": causal, "spec": spec.name, "cold_compile_s": 1.5,
                        "load_ms": 3.0, "resources": [], "plan": plan(spec, "sm90").summary()}

    monkeypatch.setattr(runner, "compile_attngen", compile_fake)
    monkeypatch.setattr(runner, "make_peers", lambda names: [_Fake("flash", _exact), _Fake("flex", _unavailable)])
    options = runner.BenchOptions(head_dims=(64, 256), seqlens=(1024, 2048), peers=("flash", "flex"),
                                  out=tmp_path / "out")
    lines: list[str] = []
    results, out = runner.run(options, log=lines.append)
    assert out == tmp_path / "out" and (out / "bench.json").is_file() and (out / "bench.md").is_file()
    model_lines = [line for line in lines if " model " in line and "measured/model" in line]
    # Every point attngen planned (hd64; hd256 did not compile) prints measured against the model.
    assert [line.split()[0] for line in model_lines] == ["hd64"] * 4 and "measured 2000 us" in model_lines[0]
    ratio = results["results"][0]["model"]["measured_over_predicted"]
    assert f"measured/model {ratio:.2f}" in model_lines[0]
    assert len(results["results"]) == 8
    first = results["results"][0]
    assert first["impls"]["attngen"]["status"] == "ok" and first["ratios"] == {"flash": 1.0, "flex": None}
    assert first["model"]["measured_us"] == 2000.0
    hd256 = [r for r in results["results"] if r["head_dim"] == 256]
    assert all(r["impls"]["attngen"]["status"] == "unavailable" for r in hd256)
    assert all(r["impls"]["flash"]["status"] == "ok" for r in hd256)
    assert "NVRTC said no" in results["compile"][-1]["error"]
    assert json.loads((out / "bench.json").read_text())["results"][0]["seqlen"] == 1024


def test_default_out_is_a_new_folder_in_the_working_one(cpu_gpu: None, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(measure, "environment", lambda: {"gpu": "NVIDIA H100 80GB HBM3"})
    monkeypatch.setattr(measure, "ceilings", lambda dtype: dict(CEILINGS))
    options = runner.BenchOptions(head_dims=(64,), seqlens=(1024,), causal=(False,), peers=(), budget_s=-1)
    monkeypatch.setattr(runner, "compile_attngen", lambda *a: (_ for _ in ()).throw(RuntimeError("x")))
    results, out = runner.run(options, log=lambda line: None)
    assert out.parent == Path(".") and re.fullmatch(r"attngen-bench-h100-\d{8}-\d{6}", out.name), out
    assert not (tmp_path / "benchmarks").exists()
    assert results["results"] == [] and results["skipped"][0]["seqlen"] == 1024


NOON = datetime.datetime(2026, 1, 2, 12, 3, 4)


def test_default_folder_is_never_an_existing_one(tmp_path: Path) -> None:
    first = output.default_folder("NVIDIA H100 80GB HBM3", parent=tmp_path, now=NOON)
    assert first == tmp_path / "attngen-bench-h100-20260102-120304" and not first.exists()
    first.mkdir()
    second = output.default_folder("NVIDIA H100 80GB HBM3", parent=tmp_path, now=NOON)
    assert second == tmp_path / "attngen-bench-h100-20260102-120304-2"
    second.write_text("a file, not a folder, is in the way too")
    assert output.default_folder("NVIDIA H100 80GB HBM3", parent=tmp_path, now=NOON).name.endswith("-3")
    backward = output.default_folder("NVIDIA H200", output.BACKWARD_PREFIX, parent=tmp_path, now=NOON)
    assert backward.name == "attngen-bench-bwd-h200-20260102-120304"
    assert output.default_folder("", now=NOON) == Path("attngen-bench-gpu-20260102-120304")


def test_written_line_names_the_folder_and_its_files() -> None:
    out = Path("attngen-bench-h100-20260102-120304")
    paths = [out / "bench.json", out / "bench.md"]
    assert output.written_line(out, paths, 70.4) == f"results written to {out} (bench.json, bench.md) in 70 s"
    assert output.written_line(out, paths) == f"results written to {out} (bench.json, bench.md)"


def test_scripts_pass_the_committed_folder_unless_told_otherwise() -> None:
    here = Path("benchmarks/results/h100")
    assert output.with_out(["--quick"], lambda: here) == ["--quick", "--out", str(here)]
    for args in (["--out", "x"], ["--out=x"], ["-o", "x"], ["-ox"], ["--merge", "a.json", "--out", "x"],
                 ["--compile-only", "sm90"], ["--compile-only=sm90"], ["--help"], ["-h"]):
        assert output.with_out(args, lambda: pytest.fail("asked for the GPU")) == args
    assert output.with_out(["--quick"], lambda: None) == ["--quick"]  # no GPU: the bench says so itself


def test_committed_folder_follows_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert output.committed_folder(Path("results")) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"name": "NVIDIA H100 PCIe"}))
    assert output.committed_folder(Path("results")) == Path("results/h100")
    assert output.committed_folder(Path("results"), "bwd") == Path("results/h100/bwd")


# ---- reports ----------------------------------------------------------------------------------


def synthetic() -> dict[str, Any]:
    summary = plan(AttentionSpec(head_dim=128, dtype="bf16", mask="none"), "sm90").summary()
    rows = []
    for s, ours, flash in ((2048, 300.0, 330.0), (8192, 360.0, 348.0)):
        cfg = Config(128, s, False)
        impls = {"attngen": {"status": "ok", "tflops": ours, "ms": cfg.flops / ours / 1e9, "rel_err": 3e-3},
                 "flash": {"status": "ok", "tflops": flash, "ms": cfg.flops / flash / 1e9, "rel_err": 3e-3},
                 "flex": {"status": "failed", "rel_err": math.inf, "error": "relative error inf | is not below"}}
        row = {**cfg.as_dict(), "impls": impls, "ratios": {"flash": ours / flash, "flex": None}}
        row["model"] = model.model_row(cfg, summary, impls["attngen"]["ms"], CEILINGS)
        rows.append(row)
    return {"schema": 1, "environment": {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-01-01", "torch": "2.11"},
            "settings": {"dtype": "bf16", "peers": ["flash", "flex"], "tolerance": 2e-2},
            "ceilings": dict(CEILINGS),
            "compile": [{"head_dim": 128, "causal": False, "spec": "none_bf16_hd128", "cold_compile_s": 1.25,
                         "load_ms": 4.5, "resources": [{"registers": 200, "spill_stores": 0, "spill_loads": 0}],
                         "plan": summary}],
            "results": rows, "skipped": [{**Config(128, 16384, False).as_dict(), "reason": "time budget 5 s spent"}]}


def test_markdown_report() -> None:
    text = report.markdown(synthetic())
    assert "# attngen forward benchmark: NVIDIA H100 80GB HBM3" in text
    assert "| hd | seqlen | causal | attngen | flash | flex | attngen/flash | attngen/flex |" in text
    assert "| 128 | 8192 | no | 360 | 348 | failed | 1.03 | – |" in text
    assert "| 128 | 2048 | no | 300 | 330 | failed | 0.91 | – |" in text
    assert "| none_bf16_hd128 |" in text and "| 1.25 | 4.5 | 200 | 0 |" in text
    assert "hd128 s2048 full flex (failed): relative error inf \\| is not below" in text
    assert "skipped, time budget 5 s spent" in text
    assert "700 TFLOP/s" in text and "3000 GB/s" in text
    model_rows = [line for line in text.splitlines() if line.startswith("| 128 |") and "(compute)" in line]
    assert len(model_rows) == 2 and "compulsory GB" in text


def test_json_round_trip_and_merge(tmp_path: Path) -> None:
    a = synthetic()
    path = report.write_json(a, tmp_path / "a")
    loaded = report.load_json(path)
    assert loaded["results"][0]["impls"]["flex"]["rel_err"] == "inf"  # JSON has no infinity
    b = synthetic()
    b["results"] = [dict(b["results"][1], seqlen=16384)]
    b["skipped"] = []
    merged = report.merge([loaded, b])
    assert [r["seqlen"] for r in merged["results"]] == [2048, 8192, 16384]
    assert merged["skipped"] == [] and len(merged["merged_from"]) == 2
    report.markdown(merged)  # renders the loaded (string 'inf') values too


def test_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed here (the GPU machine has it)")
    path = report.write_plot(synthetic(), tmp_path)
    assert path is not None and path.name == "fwd_tflops.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert report.series(synthetic(), 128, False, "flash") == ([2048, 8192], [330.0, 348.0])


def test_without_matplotlib_the_reports_are_written_and_the_plot_skipped(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    notes: list[str] = []
    paths = report.write_all(synthetic(), tmp_path, log=notes.append)
    assert [p.name for p in paths] == ["bench.json", "bench.md"] and all(p.is_file() for p in paths)
    assert notes == ["plot skipped: matplotlib is not installed (pip install 'attngen[bench]')"]


def test_bench_extra_holds_matplotlib_and_dev_stays_light() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("matplotlib") for r in extras["bench"])
    assert not any(r.startswith("matplotlib") for r in extras["dev"])


def test_terminal_table() -> None:
    from rich.console import Console

    console = Console(record=True, width=200)
    report.print_table(synthetic(), console)
    text = console.export_text()
    assert "360" in text and "1.03" in text and "0.91" in text and "cold compile 1.25 s" in text


# ---- command line -----------------------------------------------------------------------------


def test_cli_bench_help() -> None:
    result = CliRunner().invoke(app, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--quick", "--out", "--head-dims", "--seqlens", "--causal", "--dtype", "--peers", "--merge"):
        assert option in result.output
    assert "bench" in CliRunner().invoke(app, ["--help"]).output


def test_cli_bench_bad_arguments() -> None:
    result = CliRunner().invoke(app, ["bench", "--causal", "maybe"])
    assert result.exit_code == 2 and "--causal: must be both, yes or no" in result.output
    result = CliRunner().invoke(app, ["bench", "--peers", "fa3"])
    assert result.exit_code == 2 and "unknown peer(s) fa3" in result.output
    result = CliRunner().invoke(app, ["bench", "--quick", "--head-dims", "96"])
    assert result.exit_code == 2 and "no configuration" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_cli_bench_without_gpu() -> None:
    result = CliRunner().invoke(app, ["bench", "--quick", "--peers", "none"])
    assert result.exit_code == 1 and "needs a CUDA GPU" in result.output


def test_cli_merge(tmp_path: Path) -> None:
    report.write_json(synthetic(), tmp_path / "run1")
    result = CliRunner().invoke(app, ["bench", "--merge", str(tmp_path / "run1" / "bench.json"),
                                      "--out", str(tmp_path / "merged")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "merged" / "bench.md").is_file() and "1.03" in result.output


def test_cli_merge_says_where_it_wrote_and_why_there_is_no_plot(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report.write_json(synthetic(), tmp_path / "run1")
    result = CliRunner().invoke(app, ["bench", "--merge", str(tmp_path / "run1" / "bench.json"),
                                      "--out", str(tmp_path / "merged")])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == f"results written to {tmp_path / 'merged'} (bench.json, bench.md)"
    assert lines[-2] == "plot skipped: matplotlib is not installed (pip install 'attngen[bench]')"


def _bad_merge(tmp_path: Path, name: str, text: str | None, capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    from attngen.bench.command import main

    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as done:
        main(["--merge", str(path), "--out", str(tmp_path / "merged")])
    err = capsys.readouterr().err
    assert not (tmp_path / "merged").exists()
    return done.value.code, err


BAD_SHAPES = [
    ("[1, 2]", "the file holds an array, not an object"),
    ('{"environment": {}, "rows": []}', 'no "results" array'),
    ('{"results": {}}', '"results" is an object, not an array'),
    ('{"results": [{"head_dim": 64, "causal": true}]}', '"results"[0] has no "seqlen"'),
    ('{"results": [{"head_dim": "64", "seqlen": 1024, "causal": true}]}',
     '"results"[0] "head_dim" is a string, not an integer'),
    ('{"results": [{"head_dim": 64, "seqlen": 1024, "causal": true, "impls": {"flash": 3}}]}',
     '"results"[0] "impls"."flash" is a number, not an object'),
    ('{"results": [{"head_dim": 64, "seqlen": 1024, "causal": true, "model": {"tiling": "x"}}]}',
     '"results"[0] "model" has no "io_bytes"'),
    ('{"results": [], "compile": [{"head_dim": 64, "causal": 1}]}',
     '"compile"[0] "causal" is a number, not true or false'),
    ('{"results": [], "compile": [{"head_dim": 64, "causal": true}]}', '"compile"[0] has neither "error" nor "spec"'),
    ('{"results": [], "skipped": [null]}', '"skipped"[0] is null, not an object'),
    ('{"results": [], "settings": {"peers": "flash"}}', '"settings.peers" is not an array'),
    ('{"results": [], "environment": []}', '"environment" is an array, not an object'),
]


@pytest.mark.parametrize("text, problem", BAD_SHAPES)
def test_cli_merge_names_a_file_of_the_wrong_shape(text: str, problem: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _bad_merge(tmp_path, "shape.json", text, capsys)
    assert (code, err) == (1, f"error: --merge {tmp_path / 'shape.json'}: {problem}; expected a bench.json "
                              "written by attngen bench\n")


def test_cli_merge_names_a_missing_file_and_one_that_is_not_json(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    expected = "expected a bench.json written by attngen bench"
    code, err = _bad_merge(tmp_path, "missing.json", None, capsys)
    assert (code, err) == (1, f"error: --merge {tmp_path / 'missing.json'}: file not found; {expected}\n")
    code, err = _bad_merge(tmp_path, "bench.md", "# attngen forward benchmark\n", capsys)
    assert (code, err) == (1, f"error: --merge {tmp_path / 'bench.md'}: not JSON (Expecting value at line 1 "
                              f"column 1); {expected}\n")
    (tmp_path / "folder.json").mkdir()
    code, err = _bad_merge(tmp_path, "folder.json", None, capsys)
    assert (code, err) == (1, f"error: --merge {tmp_path / 'folder.json'}: cannot read it (Is a directory); "
                              f"{expected}\n")


def test_cli_merge_error_has_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    done = subprocess.run([sys.executable, "-m", "attngen", "bench", "--merge", str(tmp_path / "bad.json"), "--out",
                           str(tmp_path / "m")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: --merge {tmp_path / 'bad.json'}: not JSON (") and \
        done.stderr.count("\n") == 1, done.stderr


def test_module_and_script_entry_points_and_no_heavy_imports() -> None:
    for cmd in ([sys.executable, "-m", "attngen.bench", "--help"],
                [sys.executable, str(REPO / "benchmarks" / "run_bench.py"), "--help"]):
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
        assert done.returncode == 0 and "--quick" in done.stdout, done.stderr
    code = ("import sys, attngen.cli, attngen.bench.command, attngen.bench.runner, attngen.bench.report, "
            "attngen.bench.peers, attngen.bench.measure; "
            "print([m for m in ('torch', 'triton', 'matplotlib') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_compile_only_needs_no_gpu(tmp_path: Path) -> None:
    """`--compile-only ARCH` times the cold build and the cache load of each variant without a GPU."""
    import json

    from attngen.bench.command import main

    with pytest.raises(SystemExit) as done:
        main(["--compile-only", "sm80", "--head-dims", "64", "--causal", "yes", "--out", str(tmp_path)])
    assert done.value.code in (0, None)
    (row,) = json.loads((tmp_path / "compile.json").read_text())["variants"]
    assert row["arch"] == "sm80" and row["spec"] == "causal_bf16_hd64"
    assert row["cold_compile_s"] > 0 and not row["cold_from_cache"]
    assert row["load_from_cache"] and row["load_ms"] > 0  # a time, not a speed target (those live in benchmarks)


def test_backward_report_renders_ratios(tmp_path: Path) -> None:
    from attngen.bench import backward

    def impl(bwd: float, both: float) -> dict:
        return {"bwd_ms": 1.0, "bwd_tflops": bwd, "fwdbwd_ms": 1.0, "fwdbwd_tflops": both, "dq_rel_err": 1e-3}

    row = {"head_dim": 128, "seqlen": 8192, "causal": False, "dtype": "bf16", "attngen": impl(400, 380),
           "attngen_deterministic": impl(200, 190), "flash": impl(300, 320), "cudnn": impl(500, 520),
           "fa4": impl(800, 760)}
    text = backward.markdown([row], "# t")
    assert "| bwd attngen | flash | cudnn | fa4 | x flash | x cudnn | x fa4 | deterministic / default |" in text
    assert ("| 128 | 8192 | no | 400 | 300 | 500 | 800 | 1.33 | 0.80 | 0.50 | 0.50 | 380 | 320 | 520 | 760 | 1.19 | "
            "0.73 | 0.50 |") in text
    assert all(len(line.split("|")) == len(text.splitlines()[4].split("|")) for line in text.splitlines()[5:])
    assert "x1.33 flash" in backward.line(row) and "x0.50 fa4" in backward.line(row)
    assert "deterministic x0.50" in backward.line(row)
    failed = {**row, "cudnn": {"error": "no kernel"}}
    assert "nan" in backward.markdown([failed], "# t")
    paths = backward.write([row], tmp_path / "bwd", {"gpu": "NVIDIA H100", "line": "x"})
    assert [p.name for p in paths] == ["bwd.json", "bwd.md"] and all(p.is_file() for p in paths)


def _bwd_plans(head_dim: int, causal: bool) -> dict[str, Any]:
    from attngen.planning.planner_bwd import plan_bwd

    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none")
    det = spec.model_copy(update={"deterministic": True})
    return {"attngen": plan_bwd(spec, "sm90").summary(), "attngen_deterministic": plan_bwd(det, "sm90").summary()}


def test_backward_model_row() -> None:
    """The backward plan's predicted time, scaled by FLOPs to the row, against a fake measurement."""
    cfg = Config(128, 8192, True)
    summary = _bwd_plans(128, True)["attngen"]
    cost = summary["cost"]
    # The plan's reference: batch 1, 16 heads, seqlen 4096; the row: batch 2, 16 heads, seqlen 8192 -> 8x FLOPs.
    assert cost["flops"] == 2.5 * 16 * 4 * 4096**2 * 128 * 0.5
    row = model.backward_model_row(cfg, summary, 2.0)
    assert row["family"] == "sm90_bwd" and row["flops"] == 2.5 * cfg.flops
    assert row["predicted_us_scaled"] == pytest.approx(8 * cost["predicted_us"])
    assert row["measured_us"] == 2000.0
    assert row["measured_over_predicted"] == pytest.approx(2000.0 / (8 * cost["predicted_us"]))
    assert row["predicted_tflops"] == pytest.approx(cost["flops"] / cost["predicted_us"] / 1e6)
    missing = model.backward_model_row(cfg, summary, None)
    assert missing["measured_us"] is None and missing["measured_over_predicted"] is None


def test_backward_rows_and_report_hold_measured_against_the_model() -> None:
    from attngen.bench import backward

    cfg = Config(128, 8192, False)
    plans = _bwd_plans(128, False)

    def impl(bwd_ms: float) -> dict:
        return {"bwd_ms": bwd_ms, "bwd_tflops": 2.5 * cfg.flops / bwd_ms / 1e9, "fwdbwd_ms": 2 * bwd_ms,
                "fwdbwd_tflops": 3.5 * cfg.flops / (2 * bwd_ms) / 1e9, "dq_rel_err": 1e-3}

    row = {"head_dim": 128, "seqlen": 8192, "causal": False, "dtype": "bf16", "attngen": impl(4.0),
           "attngen_deterministic": impl(8.0), "flash": impl(5.0), "cudnn": {"error": "no kernel"}, "fa4": impl(3.0)}
    backward.annotate(row, cfg, plans)
    assert "model" not in row["flash"]
    predicted = {k: plans[k]["cost"]["predicted_us"] * 8 for k in backward.OURS}  # 2 x (8192 / 4096)^2 FLOPs
    for kind, ms in (("attngen", 4.0), ("attngen_deterministic", 8.0)):
        m = row[kind]["model"]
        assert m["predicted_us_scaled"] == pytest.approx(predicted[kind])
        assert m["measured_over_predicted"] == pytest.approx(ms * 1e3 / predicted[kind])
    ratio = 4000.0 / predicted["attngen"]
    assert (f"attngen measured 4000 us / model {predicted['attngen']:.0f} us = {ratio:.2f}" in backward.line(row))
    assert "deterministic measured 8000 us" in backward.line(row)
    text = backward.markdown([row], "# t")
    assert "| model µs | measured/model | deterministic model µs | deterministic measured/model |" in text
    det_ratio = 8000.0 / predicted["attngen_deterministic"]
    assert text.splitlines()[-1].endswith(f"| {predicted['attngen']:.0f} | {ratio:.2f} | "
                                          f"{predicted['attngen_deterministic']:.0f} | {det_ratio:.2f} |")
    assert all(len(line.split("|")) == len(text.splitlines()[4].split("|")) for line in text.splitlines()[5:])


def test_backward_runs_on_the_forward_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench --backward` walks model.grid's configurations and compiles once per (head dim, causal)."""
    from attngen.bench import backward

    compiled: list[tuple[int, bool]] = []
    monkeypatch.setattr(backward, "_compile", lambda cfg, dtype: compiled.append((cfg.head_dim, cfg.causal)) or {})

    def fake_row(cfg: Config, dtype: str, kernels: dict[str, object]) -> dict[str, object]:
        assert cfg.batch == max(1, 16384 // cfg.seqlen) and cfg.heads == 2048 // cfg.head_dim
        done = {"bwd_tflops": 1.0, "fwdbwd_tflops": 1.0}
        return {"head_dim": cfg.head_dim, "seqlen": cfg.seqlen, "causal": cfg.causal, "dtype": dtype,
                **{k: done for k in ("attngen", "attngen_deterministic", *backward.PEERS)}}

    monkeypatch.setattr(backward, "_row", fake_row)
    lines: list[str] = []
    rows = backward.run((64, 128), (8192, 2048), (False, True), "bf16", log=lines.append)
    assert compiled == [(64, False), (64, True), (128, False), (128, True)]
    assert [(r["head_dim"], r["causal"], r["seqlen"]) for r in rows] == [
        (d, c, s) for d in (64, 128) for c in (False, True) for s in (2048, 8192)]
    assert len(lines) == len(rows)


def test_fa4_is_a_peer_where_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashAttention-4 (flash_attn.cute) runs forward and backward beside the SDPA backends when it imports, on
    q, k, v in their own layout; where it does not, the peer is Unavailable (a row's note), not a failure."""
    import sys
    import types

    from attngen.bench import backward

    assert "fa4" in model.PEERS and "fa4" in backward.PEERS
    (impl,) = peers.make_peers(("fa4",))
    cfg = Config(head_dim=64, seqlen=128, causal=True)
    q = torch.randn(1, 128, 2, 64)
    monkeypatch.setitem(sys.modules, "flash_attn", None)   # an import of it fails
    with pytest.raises(peers.Unavailable, match="flash_attn.cute does not import"):
        impl.prepare(cfg, q, q, q)
    calls: list[dict[str, Any]] = []

    def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> Any:
        calls.append({"shape": tuple(q.shape), "causal": causal})
        return q * 2, torch.zeros(1)

    package = types.ModuleType("flash_attn")
    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    package.cute = cute  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    assert torch.equal(impl.prepare(cfg, q, q, q)(), q * 2)
    assert torch.equal(backward._impl("fa4", None, False)(q, q, q), q * 2)
    assert calls == [{"shape": (1, 128, 2, 64), "causal": True}, {"shape": (1, 128, 2, 64), "causal": False}]
