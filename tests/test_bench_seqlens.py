"""The per-entry length suites on the CPU: options, points, bytes and FLOPs, document lengths, reports, CLI."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attngen import env
from attngen.bench import seqlens, seqlens_report
from attngen.bench.command import app as bench_app
from attngen.bench.seqlens import DecodeOptions, DecodePoint, VarlenOptions
from attngen.cli import app

# ---- options -------------------------------------------------------------------------------------------------


def test_decode_options_defaults_and_parsing() -> None:
    o = seqlens.decode_options({})
    assert o == DecodeOptions()
    assert (o.head_dims, o.heads, o.kv_heads, o.seqlen_q, o.group) == ((128,), 32, 8, 1, 4)
    assert o.batches == (1, 8, 32, 64) and o.caches == (1024, 4096, 32768, 131072)
    assert o.page_size == 256 and o.peers == ("flash", "cudnn", "fa4")
    o = seqlens.decode_options({"head_dims": "64,128", "heads": 16, "kv_heads": 2, "seqlen_q": 16,
                                "batches": "2,4", "caches": "512,2k", "peers": "cudnn,none", "page_size": 16})
    assert (o.head_dims, o.heads, o.kv_heads, o.seqlen_q, o.batches, o.caches, o.peers, o.page_size) == \
        ((64, 128), 16, 2, 16, (2, 4), (512, 2048), ("cudnn",), 16)


@pytest.mark.parametrize(("opts", "message"), [
    ({"seqlen_q": 0}, "--seqlen-q must be 1..16"),
    ({"seqlen_q": 17}, "--seqlen-q must be 1..16"),
    ({"heads": 32, "kv_heads": 5}, "multiple of --kv-heads"),
    ({"caches": "1000"}, "multiples of the page size 256"),
    ({"caches": "1k", "page_size": 48}, "multiples of the page size 48"),
    ({"page_size": 8}, "--page-size must be a multiple of 16 from 16 to 256, got 8"),
    ({"page_size": 200}, "--page-size must be a multiple of 16 from 16 to 256, got 200"),
    ({"batches": "x"}, "--batches:"),
    ({"caches": ""}, "--caches: an empty list"),
    ({"peers": "efficient"}, "--peers: unknown peer(s) efficient"),
])
def test_decode_options_errors(opts: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        seqlens.decode_options(opts)


def test_varlen_options() -> None:
    o = seqlens.varlen_options({})
    assert o == VarlenOptions()
    assert (o.head_dims, o.heads, o.total_tokens, o.min_len, o.max_len, o.seed, o.peers) == \
        ((128,), 16, 32768, 64, 8192, 0, ("flash", "fa4"))
    o = seqlens.varlen_options({"doc_lengths": "128..2k", "total_tokens": 16384, "seed": 3, "heads": 8})
    assert (o.min_len, o.max_len, o.total_tokens, o.seed, o.heads) == (128, 2048, 16384, 3, 8)
    for opts, message in (({"doc_lengths": "64-8k"}, "--doc-lengths: expected MIN..MAX"),
                          ({"doc_lengths": "2k..64"}, "1 <= min <= max"),
                          ({"total_tokens": 10000}, "multiple of 8192"),
                          ({"peers": "cudnn"}, "unknown peer")):
        with pytest.raises(ValueError, match=message):
            seqlens.varlen_options(opts)
    assert seqlens.parse_range("64..8K") == (64, 8192)


# ---- decode points and bytes ---------------------------------------------------------------------------------


def test_decode_points_skip_what_does_not_fit() -> None:
    points, skipped = seqlens.decode_points(DecodeOptions())
    assert len(points) + len(skipped) == 16
    assert {(s["batch"], s["cache"]) for s in skipped} == {(32, 131072), (64, 131072)}
    assert "over --memory-gib 40" in skipped[0]["reason"] and "80.0 GiB" in skipped[0]["reason"]
    assert points[0] == DecodePoint(128, 1, 1024) and points[0].label == "hd128 b1 cache 1k"
    # 64 x 32k: 8 GiB of K+V, 40 GiB with the copy repeated 4x: exactly at the limit, kept
    assert DecodePoint(128, 64, 32768) in points
    points, skipped = seqlens.decode_points(DecodeOptions(memory_gib=1.0, batches=(1, 8), caches=(4096, 1024)))
    assert [(p.batch, p.cache) for p in points] == [(1, 1024), (1, 4096), (8, 1024), (8, 4096)]
    assert not skipped
    assert seqlens.decode_points(DecodeOptions(memory_gib=0.001))[0] == []


def test_decode_bytes_and_ratios() -> None:
    assert seqlens.kv_bytes(1, 32768, 8, 128) == 2 * 32768 * 8 * 128 * 2 == 134217728
    point = DecodePoint(128, 2, 1024)
    assert seqlens.footprint_bytes(point, DecodeOptions()) == seqlens.kv_bytes(2, 1024, 8, 128) * 5
    assert seqlens.footprint_bytes(point, DecodeOptions(heads=8)) == seqlens.kv_bytes(2, 1024, 8, 128) * 2
    assert seqlens.gbps(1e9, 1.0) == pytest.approx(1000.0) and seqlens.gbps(1e9, None) is None
    r = seqlens.decode_ratios({"attngen": 0.2, "attngen_paged": 0.3, "flash": 0.4, "cudnn": 0.3, "fa4": None},
                              ("flash", "cudnn", "fa4"))
    assert r["best_peer"] == "cudnn"
    assert r["best_peer_over_attngen"] == pytest.approx(1.5) and r["paged_over_contiguous"] == pytest.approx(1.5)
    r = seqlens.decode_ratios({"attngen": None, "flash": None}, ("flash",))
    assert r == {"best_peer": None, "best_peer_over_attngen": None, "paged_over_contiguous": None}


# ---- varlen documents and FLOPs ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("total", "lo", "hi"), [(32768, 64, 8192), (8192, 64, 8192), (65536, 512, 1024),
                                                 (16384, 1, 16384)])
def test_doc_lengths_sum_range_and_determinism(seed: int, total: int, lo: int, hi: int) -> None:
    lengths = seqlens.doc_lengths(total, lo, hi, seed)
    assert sum(lengths) == total
    assert all(lo <= n <= hi for n in lengths)
    assert lengths == seqlens.doc_lengths(total, lo, hi, seed)


def test_doc_lengths_spread() -> None:
    lengths = seqlens.doc_lengths(1 << 20, 64, 8192, 0)
    assert min(lengths) < 128 and max(lengths) > 4096  # log-uniform: both ends drawn
    assert seqlens.doc_lengths(32768, 64, 8192, 0) != seqlens.doc_lengths(32768, 64, 8192, 1)


def test_flops() -> None:
    # one causal document: 4 n^2 d h / 2 forward, x3.5 forward + backward
    assert seqlens.causal_flops([1024], 128, 16, passes=1.0) == 4 * 1024**2 * 128 * 16 / 2
    assert seqlens.causal_flops([1024, 2048], 128, 16) == pytest.approx(3.5 * 2 * 128 * 16 * (1024**2 + 2048**2))
    assert seqlens.dense_batch(32768) == 4 and seqlens.dense_batch(8192) == 1
    dense = seqlens.causal_flops([8192] * 4, 128, 16)
    assert seqlens.tflops(dense, 10.0) == pytest.approx(dense / 1e-2 / 1e12) and seqlens.tflops(1.0, None) is None
    r = seqlens.varlen_ratios({"attngen_varlen": 300.0, "attngen_dense": 400.0, "flash": 250.0, "fa4": None})
    assert r == {"varlen_over_dense": 0.75, "attngen_over_flash": 1.2, "attngen_over_fa4": None}


def test_trusted_seqlens_is_scoped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(seqlens.TRUST_SEQLENS, raising=False)
    assert env.check_seqlens()
    with seqlens.trusted_seqlens():
        assert not env.check_seqlens()
    assert env.check_seqlens() and seqlens.TRUST_SEQLENS not in os.environ
    monkeypatch.setenv(seqlens.TRUST_SEQLENS, "0")
    with seqlens.trusted_seqlens():
        assert not env.check_seqlens()
    assert os.environ[seqlens.TRUST_SEQLENS] == "0"


# ---- reports from canned results -----------------------------------------------------------------------------

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-01-01", "torch": "2.11.0", "attngen": "0.1"}


def _entry(ms: float | None, nbytes: int = 1 << 27, copy_gbps: float = 3000.0, **extra: Any) -> dict[str, Any]:
    if ms is None:
        return {"status": "unavailable", "error": "flash_attn.cute does not import"}
    rate = seqlens.gbps(nbytes, ms) or 0.0
    return {"status": "ok", "ms": ms, "rel_err": 1e-3, "gbps": rate, "fraction_of_copy": rate / copy_gbps, **extra}


def decode_results() -> dict[str, Any]:
    options = DecodeOptions(batches=(1, 8), caches=(32768,))
    impls = {"attngen": _entry(0.2), "attngen_paged": _entry(0.3), "flash": _entry(0.4, reads_repeated_kv=True),
             "cudnn": _entry(0.25, reads_repeated_kv=True), "fa4": _entry(None)}
    rows = [{"head_dim": 128, "batch": b, "cache": 32768, "kv_bytes": 1 << 27, "impls": copy.deepcopy(impls),
             "ratios": seqlens.decode_ratios({n: e.get("ms") for n, e in impls.items()}, options.peers)}
            for b in options.batches]
    settings = {"heads": 32, "kv_heads": 8, "seqlen_q": 1, "page_size": 256, "dtype": "bf16",
                "checks": seqlens.DECODE_CHECK_NOTE, "gqa": seqlens.GQA_NOTE, "mask": seqlens.MASK_NOTE,
                "check": "float32 attention of batch element 0"}
    return {"suite": "decode", "environment": ENV, "copy": {"copy_gbps": 3000.0}, "settings": settings,
            "rows": rows, "skipped": [{"head_dim": 128, "batch": 64, "cache": 131072, "reason": "needs 160.0 GiB"}]}


def varlen_results() -> dict[str, Any]:
    lengths = seqlens.doc_lengths(32768, 64, 8192, 0)
    flops = seqlens.causal_flops(lengths, 128, 16)
    impls = {"attngen_varlen": {"status": "ok", "ms": 4.5, "tflops": seqlens.tflops(flops, 4.5)},
             "flash": {"status": "ok", "ms": 4.0, "tflops": seqlens.tflops(flops, 4.0)},
             "fa4": {"status": "unavailable", "error": "flash_attn.cute does not import"},
             "attngen_dense": {"status": "ok", "ms": 9.0, "tflops": 430.0}}
    row = {"head_dim": 128, "heads": 16, "total": 32768, "docs": len(lengths), "longest": max(lengths),
           "impls": impls, "ratios": seqlens.varlen_ratios({n: e.get("tflops") for n, e in impls.items()})}
    settings = {"heads": 16, "dtype": "bf16", "distribution": "log-uniform", "min_len": 64, "max_len": 8192,
                "seed": 0, "dense_seqlen": 8192, "flops": "4 * n^2 * d * h / 2", "trust_seqlens": seqlens.TRUST_NOTE,
                "check": "float32 autograd"}
    return {"suite": "varlen", "environment": ENV, "settings": settings, "lengths": lengths, "rows": [row]}


def test_decode_report() -> None:
    results = decode_results()
    md = seqlens_report.decode_markdown(results)
    assert "# attngen bench --decode: NVIDIA H100 80GB HBM3" in md and "3000 GB/s" in md
    assert "check the lengths and the block table themselves" in md and "repeated" in md
    assert "| 128 | 1 | 32k | 0.200 ms, 671 GB/s (0.22) |" in md
    assert "0.400 ms, 336 GB/s (0.11) (rep)" in md
    assert "| cudnn | 1.25 | 1.50 |" in md
    assert "hd128 b1 cache 32k fa4: unavailable: flash_attn.cute does not import" in md
    assert "hd128 b64 cache 128k: needs 160.0 GiB" in md
    line = seqlens_report.decode_line(results["rows"][0])
    assert line.startswith("decode hd128 b1 cache 32k: attngen 0.200 ms 671 GB/s (0.22 of copy)")
    assert "fa4 UNAVAILABLE" in line and "best peer (cudnn) / attngen x1.25" in line and "x1.50" in line


def test_varlen_report() -> None:
    results = varlen_results()
    md = seqlens_report.varlen_markdown(results)
    row = results["rows"][0]
    assert f"over {row['docs']} causal documents" in md and "sequences of 8192" in md
    assert "| 128 | attngen_varlen | 4.500 |" in md and "| 128 | attngen_dense | 9.000 | 430 | ok |" in md
    assert "| hd | varlen_over_dense | attngen_over_flash | attngen_over_fa4 |" in md
    assert "unavailable: flash_attn.cute does not import" in md
    assert f"| 128 | {row['ratios']['varlen_over_dense']:.2f} | 0.89 | - |" in md
    line = seqlens_report.varlen_line(row)
    assert line.startswith(f"varlen hd128 {row['docs']} docs / 32768 tokens: attngen_varlen 4.50 ms")
    assert "fa4 UNAVAILABLE" in line and "attngen_over_flash x0.89" in line


def test_reports_written_and_plot_skipped_without_matplotlib(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    notes: list[str] = []
    paths = seqlens_report.write_decode(decode_results(), tmp_path, log=notes.append)
    paths += seqlens_report.write_varlen(varlen_results(), tmp_path, log=notes.append)
    assert [p.name for p in paths] == ["decode.json", "decode.md", "varlen.json", "varlen.md"]
    assert notes == ["plot skipped: matplotlib is not installed (pip install 'attngen[bench]')"] * 2
    assert json.loads((tmp_path / "decode.json").read_text())["rows"][0]["impls"]["flash"]["reads_repeated_kv"]
    assert seqlens_report.write_decode(decode_results(), tmp_path / "quiet", log=None)[-1].name == "decode.md"


def test_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed here (the GPU machine has it)")
    assert seqlens_report.write_decode(decode_results(), tmp_path)[-1].name == "decode_gbps.png"
    assert seqlens_report.write_varlen(varlen_results(), tmp_path)[-1].name == "varlen_tflops.png"


# ---- the command line ----------------------------------------------------------------------------------------


def test_cli_help_names_the_suites_and_their_options() -> None:
    result = CliRunner().invoke(app, ["bench", "--decode", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--decode", "--varlen", "--batches", "--caches", "--seqlen-q", "--heads", "--kv-heads",
                   "--memory-gib", "--total-tokens", "--doc-lengths", "--seed"):
        assert option in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--decode", "--varlen"], "separate runs"),
    (["--decode", "--seqlen-q", "32"], "--seqlen-q must be 1..16"),
    (["--decode", "--peers", "flex"], "unknown peer(s) flex"),
    (["--decode", "--memory-gib", "0.001"], "no decode point fits --memory-gib"),
    (["--decode", "--dtype", "fp8"], "--dtype must be bf16 or fp16"),
    (["--varlen", "--total-tokens", "1000"], "multiple of 8192"),
    (["--varlen", "--doc-lengths", "64"], "--doc-lengths: expected MIN..MAX"),
])
def test_cli_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_cli_runs_the_suites_with_their_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from attngen.bench import decode, varlen

    seen: dict[str, Any] = {}

    def fake(name: str) -> Any:
        def run(options: Any, log: Any = print) -> tuple[Path, list[Path], float]:
            seen[name] = options
            return Path("out"), [Path("out") / f"{name}.json"], 1.0
        return run

    monkeypatch.setattr(decode, "run", fake("decode"))
    monkeypatch.setattr(varlen, "run", fake("varlen"))
    result = CliRunner().invoke(app, ["bench", "--decode", "--batches", "1,2", "--caches", "1k", "--seqlen-q", "4",
                                      "--kv-heads", "4", "--peers", "flash", "--out", "x"])
    assert result.exit_code == 0 and "results written to out (decode.json)" in result.output, result.output
    assert seen["decode"] == DecodeOptions(batches=(1, 2), caches=(1024,), seqlen_q=4, kv_heads=4,
                                           peers=("flash",), out=Path("x"))
    result = CliRunner().invoke(app, ["bench", "--varlen", "--total-tokens", "16384", "--doc-lengths", "128..4k",
                                      "--head-dims", "64,128"])
    assert result.exit_code == 0, result.output
    assert seen["varlen"] == VarlenOptions(head_dims=(64, 128), total_tokens=16384, min_len=128, max_len=4096)


def test_cli_suites_without_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the message without a GPU")
    for suite in ("--decode", "--varlen"):
        result = CliRunner().invoke(app, ["bench", suite])
        assert result.exit_code == 1 and "needs a CUDA GPU" in result.output, result.output


def test_decode_report_shows_graphed_times() -> None:
    """Rows with CUDA-graph times get a second table and a 'graphed' line; rows without keep the eager report."""
    results = decode_results()
    row = results["rows"][0]
    for name, us in (("attngen", 30.0), ("attngen_paged", 31.0), ("flash", 40.0), ("cudnn", 20.0)):
        ms = us / 1e3
        rate = seqlens.gbps(row["kv_bytes"], ms) or 0.0
        row["impls"][name].update(graph_ms=ms, graph_gbps=rate, graph_fraction_of_copy=rate / 3000.0)
    row["graph_ratios"] = seqlens.decode_ratios({n: e.get("graph_ms") for n, e in row["impls"].items()},
                                                ("flash", "cudnn", "fa4"))
    line = seqlens_report.decode_line(row)
    assert "graphed: attngen 30.0 us" in line and "best peer (cudnn) / attngen x0.67" in line
    assert "graphed" not in seqlens_report.decode_line(results["rows"][1])
    md = seqlens_report.decode_markdown(results)
    assert "In CUDA graphs" in md and "| 128 | 1 | 32k | 30.0 (" in md and "| cudnn | 0.67 | 1.03 |" in md


# ---- varlen timing: the implementations in alternating rounds -------------------------------------------------------


def test_varlen_steps_are_timed_in_turn_and_report_the_median_of_their_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round after round, each step once in turn; attngen's under the trusted-lengths context only; the median of the
    rounds; a step that fails while timed is recorded and the others go on."""
    from contextlib import contextmanager

    from attngen.bench import measure, varlen

    calls: list[tuple[str, bool]] = []
    trusted = {"on": False}

    @contextmanager
    def fake_trusted() -> Any:
        trusted["on"] = True
        yield
        trusted["on"] = False

    readings = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 4.0, 6.0])}

    def make(name: str) -> Any:
        def fn() -> str:
            if name == "bad" and sum(1 for c in calls if c[0] == "bad") == 2:
                raise RuntimeError("launch failed")
            return name
        return fn

    def fake_time(fn: Any) -> float:
        name = fn()
        calls.append((name, trusted["on"]))
        return next(readings[name]) if name in readings else 1.0

    monkeypatch.setattr(measure, "time_ms", fake_time)
    monkeypatch.setattr(seqlens, "trusted_seqlens", fake_trusted)
    timed = {"a": varlen.Timed(make("a"), True, 3e12), "bad": varlen.Timed(make("bad"), False, 1e12),
             "b": varlen.Timed(make("b"), False, 8e12)}
    out = varlen.time_rounds(timed, 3)
    assert calls == [("a", True), ("bad", False), ("b", False), ("a", True), ("bad", False), ("b", False),
                     ("a", True), ("b", False)]
    assert out["a"] == {"ms": 2.0, "tflops": seqlens.tflops(3e12, 2.0), "rounds_ms": [3.0, 1.0, 2.0]}
    assert out["b"]["ms"] == 5.0 and out["b"]["rounds_ms"] == [5.0, 4.0, 6.0]
    assert out["bad"] == {"status": "error", "error": "RuntimeError: launch failed"}


def test_varlen_report_says_how_the_steps_were_timed() -> None:
    results = varlen_results()
    assert "- Timing: each step timed once, one after the other." in seqlens_report.varlen_markdown(results)
    results["settings"]["timing"] = "5 rounds"
    assert "- Timing: 5 rounds." in seqlens_report.varlen_markdown(results)
