"""`attngen bench --variant` on the CPU: the FlexAttention translation of masks and score mods (against the
NumPy evaluator on index grids, and through FlexAttention's own CPU forward against attngen.reference), the
spec loading, the runtime arguments, the visible-FLOP count, the FA4 keyword mapping, the reports from a
fake result and the command line. Timing needs a GPU (`attngen bench --variant SPEC` there).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import attngen
from attngen import expr as lang
from attngen.bench import flex_equiv, variant
from attngen.cli import app
from attngen.features.variant import variant_of
from attngen.spec.model import AttentionSpec

F32 = {"dtype": "fp32"}
I32 = {"dtype": "int32"}

#: Masks: (spec fields, what they exercise).
MASKS: list[dict[str, Any]] = [
    {"mask": "causal"},
    {"mask": {"kind": "chunked", "chunk": 48}},
    {"mask": {"kind": "sliding_window", "window": [17, 5]}},
    {"mask": "prefix_lm"},
    {"name": "document", "mask": {"expr": "doc[b, q_idx] == doc[b, kv_idx] and kv_idx <= q_idx",
                                  "tensors": {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}}},
    {"name": "streaming", "mask": {"expr": "kv_idx <= q_idx + sk - sq and (q_idx + sk - sq - kv_idx <= 40 "
                                           "or kv_idx < 4)"}},
    {"name": "floor_ops", "mask": {"expr": "(q_idx - 70) // 16 == (kv_idx - 70) // 16 or (kv_idx - q_idx) % 7 == 3 "
                                           "or (q_idx // (kv_idx % 5)) % 2 == 1"}},
    {"name": "if_minmax", "mask": {
        "expr": "(kv_idx <= q_idx) if h % 2 == 0 else not (max(q_idx, kv_idx, w) - min(q_idx, kv_idx) > w)",
        "scalars": {"w": I32}}},
    {"name": "floats", "mask": {
        "expr": "floor(sqrt(q_idx + 1.0) * s) >= floor(kv_idx / 9) and tab[h, kv_idx // 32] > -0.5",
        "scalars": {"s": F32}, "tensors": {"tab": {"dtype": "fp32", "shape": ["heads", 3]}}}},
]
#: Score mods.
SCORE_MODS: list[dict[str, Any]] = [
    {"score_mod": {"softcap": 7.5}},
    {"score_mod": {"alibi": "standard"}},
    {"score_mod": {"alibi": "runtime"}},
    {"name": "bias_table", "score_mod": {
        "expr": "score + bias[h, min(abs(q_idx - kv_idx), 15)]",
        "tensors": {"bias": {"dtype": "fp32", "shape": ["heads", 16]}}}},
    {"name": "branches", "score_mod": {
        "expr": "(score * t if q_idx >= kv_idx else -score) + 0.25 * log(1.0 + exp(score)) - sigmoid(score) "
                "+ max(score, 0.0) ** 2 / 8 - min(kv_idx, 3) + (q_idx % 3) / 2",
        "scalars": {"t": F32}}},
]


def _spec(fields: dict[str, Any], head_dim: int = 64) -> AttentionSpec:
    return AttentionSpec.model_validate({"head_dim": head_dim, "dtype": "bf16", **fields})


def _args(spec: AttentionSpec, batch: int, heads: int, seqlen: int, seed: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    return variant.make_args(variant_of(spec), batch, heads, seqlen, seqlen, "cpu", gen)


def _numpy_args(spec: AttentionSpec, args: dict[str, Any], heads: int) -> tuple[dict[str, Any], dict[str, Any]]:
    tensors, scalars = variant.numpy_args(variant_of(spec), args, heads)
    return tensors, scalars


def _grids(sq: int, sk: int) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(sq)[:, None], np.arange(sk)[None, :]


@pytest.mark.parametrize("fields", MASKS, ids=lambda f: f.get("name") or str(f["mask"]))
@pytest.mark.parametrize(("sq", "sk"), [(96, 96), (37, 130), (130, 37)])
def test_mask_mod_matches_the_numpy_evaluator(fields: dict[str, Any], sq: int, sk: int) -> None:
    spec = _spec(fields)
    var = variant_of(spec)
    tree = var.mask.parsed()
    args = variant.make_args(var, 2, 3, sq, sk, "cpu", torch.Generator().manual_seed(1))
    closure = flex_equiv.closure_of(var, args, sq, sk, 3, "cpu")
    tensors, scalars = variant.numpy_args(var, args, 3)
    rows, cols = _grids(sq, sk)
    mod = flex_equiv.mask_mod(tree, closure)
    for b in range(2):
        for h in range(3):
            want = np.broadcast_to(lang.evaluate(tree, {"b": b, "h": h, "q_idx": rows, "kv_idx": cols, "sq": sq,
                                                        "sk": sk}, tensors=tensors, scalars=scalars), (sq, sk))
            got = mod(torch.tensor(b), torch.tensor(h), torch.from_numpy(rows), torch.from_numpy(cols))
            got = np.broadcast_to(got.numpy(), (sq, sk))
            assert got.dtype == np.bool_
            assert (got == want).all(), f"{spec.name} b{b} h{h}: {(got != want).sum()} elements differ"


@pytest.mark.parametrize("fields", SCORE_MODS, ids=lambda f: f.get("name") or str(f["score_mod"]))
def test_score_mod_matches_the_numpy_evaluator(fields: dict[str, Any]) -> None:
    spec = _spec(fields)
    var = variant_of(spec)
    assert var.score_mod is not None
    tree = var.score_mod.parsed()
    sq, sk, heads = 40, 70, 5
    args = variant.make_args(var, 1, heads, sq, sk, "cpu", torch.Generator().manual_seed(2))
    closure = flex_equiv.closure_of(var, args, sq, sk, heads, "cpu")
    tensors, scalars = variant.numpy_args(var, args, heads)
    rows, cols = _grids(sq, sk)
    score = (torch.randn(sq, sk, generator=torch.Generator().manual_seed(3)) * 6).float()
    mod = flex_equiv.score_mod(tree, closure)
    for h in range(heads):
        env = {"b": 0, "h": h, "q_idx": rows, "kv_idx": cols, "sq": sq, "sk": sk, "score": score.double().numpy()}
        want = lang.evaluate(tree, env, tensors=tensors, scalars=scalars)
        got = mod(score, torch.tensor(0), torch.tensor(h), torch.from_numpy(rows), torch.from_numpy(cols))
        assert got.dtype == torch.float32
        np.testing.assert_allclose(got.double().numpy(), want, rtol=2e-5, atol=2e-5)


def test_integer_division_by_zero_is_zero_and_floor_saturates() -> None:
    spec = _spec({"name": "zero_div", "score_mod": {"expr": "score + (q_idx // (kv_idx - 3)) + q_idx % (kv_idx - 3) "
                                                             "+ floor(score * 1e12) / 1e12"}})
    var = variant_of(spec)
    assert var.score_mod is not None
    tree = var.score_mod.parsed()
    rows, cols = _grids(9, 9)
    score = torch.linspace(-3, 3, 81).reshape(9, 9)
    got = flex_equiv.score_mod(tree, flex_equiv.Closure(9, 9))(score, 0, 0, torch.from_numpy(rows),
                                                               torch.from_numpy(cols))
    want = lang.evaluate(tree, {"b": 0, "h": 0, "q_idx": rows, "kv_idx": cols, "sq": 9, "sk": 9,
                                "score": score.double().numpy()})
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-5)


def test_constant_trees_give_tensors() -> None:
    closure = flex_equiv.Closure(8, 8)
    q, kv = torch.arange(8)[:, None], torch.arange(8)[None, :]
    tree = lang.parse("sq == sk", role="mask")
    assert flex_equiv.mask_mod(tree, closure)(0, 0, q, kv).all()
    assert not flex_equiv.mask_mod(lang.parse("sq < 0", role="mask"), closure)(0, 0, q, kv).any()
    score = torch.zeros(8, 8)
    out = flex_equiv.score_mod(lang.parse("2.5 * sq // 3", role="score_mod"), closure)(score, 0, 0, q, kv)
    assert out.shape == score.shape and float(out[0, 0]) == 2.5 * 8 // 3


# ---- through FlexAttention itself (its CPU forward) against attngen.reference -------------------------------
FLEX_CASES = [*MASKS[1:], *SCORE_MODS, {"mask": "causal", "sinks": "learnable"},
              {"mask": {"kind": "sliding_window", "window": [20, 0]}, "score_mod": {"softcap": 5.0},
               "sinks": "learnable"}]


@pytest.mark.parametrize("fields", FLEX_CASES, ids=lambda f: _spec(f).name)
def test_flex_attention_with_the_translated_mods_matches_the_reference(fields: dict[str, Any]) -> None:
    spec = _spec(fields)
    var = variant_of(spec)
    batch, heads, seqlen, d = 2, 3, 160, 64
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(batch, seqlen, heads, d, generator=gen) for _ in range(3))
    args = variant.make_args(var, batch, heads, seqlen, seqlen, "cpu", gen)
    closure = flex_equiv.closure_of(var, args, seqlen, seqlen, heads, "cpu")
    equiv = flex_equiv.equivalent(var, closure, args.get("sinks"))
    from torch.nn.attention.flex_attention import flex_attention

    block = equiv.block_mask(batch, heads, seqlen, seqlen, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = equiv.forward(flex_attention, block)(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    want, _ = attngen.reference(spec, q, k, v, **args)
    err = float(np.linalg.norm(out.detach().double().numpy() - want) / np.linalg.norm(want))
    assert err < 1e-5, f"{spec.name}: relative error {err:.2e}"


@pytest.mark.parametrize("fields", MASKS, ids=lambda f: f.get("name") or str(f["mask"]))
def test_mask_mod_under_vmap_matches_the_twin(fields: dict[str, Any]) -> None:
    """FlexAttention's create_mask vmaps the mod over (b, h, q_idx, kv_idx), as create_block_mask does."""
    from torch.nn.attention.flex_attention import create_mask

    spec = _spec(fields)
    var = variant_of(spec)
    batch, heads, sq, sk = 2, 3, 70, 90
    args = variant.make_args(var, batch, heads, sq, sk, "cpu", torch.Generator().manual_seed(6))
    closure = flex_equiv.closure_of(var, args, sq, sk, heads, "cpu")
    tensors, scalars = variant.numpy_args(var, args, heads)
    got = create_mask(flex_equiv.mask_mod(var.mask.parsed(), closure), batch, heads, sq, sk, device="cpu")
    for b in range(batch):
        for h in range(heads):
            want = var.mask.visible(np.arange(sq), np.arange(sk), sq, sk, b=b, h=h, tensors=tensors, scalars=scalars)
            assert (got[b, h].numpy() == want).all(), f"{spec.name} b{b} h{h}"


# ---- specs, arguments, FLOPs ------------------------------------------------------------------------------------


def test_load_by_path_and_by_catalogue_name(tmp_path: Path) -> None:
    assert variant.load("llama4_chunked_bf16_hd128").mask.chunk == 8192
    assert variant.load("mistral_bf16_hd128.yaml").name == "mistral_bf16_hd128"  # a catalogue file by its name
    assert variant.load(str(Path(attngen.__file__).parent.parent / "specs" / "gpt_oss_bf16_hd64.yaml")).sinks.value \
        == "learnable"
    with pytest.raises(ValueError, match="no catalogue spec"):
        variant.load("no_such_spec")
    with pytest.raises(ValueError, match="spec file not found"):
        variant.load(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("head_dim: 100\ndtype: bf16\nmask: causal\n")
    with pytest.raises(ValueError) as info:
        variant.load(str(tmp_path / "bad.yaml"))
    assert "\n" not in str(info.value) and "head_dim 100" in str(info.value)


@pytest.mark.parametrize(("name", "mask"), [
    ("gemma2_local_bf16_hd256", "window_4095_0"), ("gpt_oss_bf16_hd64", "window_127_0"),
    ("gemma2_global_bf16_hd256", "causal"), ("llama4_chunked_bf16_hd128", "causal"),
    ("document_bf16_hd128", "causal"), ("prefix_lm_bf16_hd128", "causal"), ("bloom_alibi_bf16_hd128", "causal")])
def test_plain_kernel_of_a_variant(name: str, mask: str) -> None:
    spec = variant.load(name)
    plain = variant.plain_of(spec)
    assert (plain.head_dim, plain.dtype) == (spec.head_dim, spec.dtype)
    assert plain.is_plain and variant_of(plain).mask.name_part == mask
    assert plain.name != spec.name


def test_runtime_arguments() -> None:
    spec = _spec({"mask": "prefix_lm", "sinks": "learnable", "score_mod": {"alibi": "runtime"}})
    args = _args(spec, 3, 4, 500)
    assert args["prefix_len"].dtype == torch.int32 and args["prefix_len"].shape == (3,)
    assert int(args["prefix_len"].min()) >= 0 and int(args["prefix_len"].max()) <= 500
    sinks = args["sinks"]
    assert sinks.shape == (4,) and sinks.requires_grad and torch.equal(sinks, sinks.bfloat16().float())
    assert torch.allclose(args["alibi_slopes"], torch.tensor([0.25, 0.0625, 0.015625, 0.00390625]))
    doc = _args(variant.load("document_bf16_hd128"), 2, 1, 4096)["doc"]
    assert doc.shape == (2, 4096) and doc.dtype == torch.int32 and (doc.diff(dim=1) >= 0).all()
    assert int(doc[:, -1].min()) >= 2 and int(doc[:, -1].max()) <= 30  # about 8 documents a row
    _, scalars = _numpy_args(_spec(MASKS[7]), _args(_spec(MASKS[7]), 1, 2, 64), 2)
    assert isinstance(scalars["w"], int) and 0 <= scalars["w"] <= 64


def _brute_force(spec: AttentionSpec, batch: int, heads: int, seqlen: int, args: dict[str, Any]) -> int:
    var = variant_of(spec)
    tensors, scalars = variant.numpy_args(var, args, heads)
    rows = np.arange(seqlen)
    return sum(int(var.mask.visible(rows, rows, seqlen, seqlen, b=b, h=h, tensors=tensors, scalars=scalars).sum())
               for b in range(batch) for h in range(heads))


@pytest.mark.parametrize("fields", [{"mask": "none"}, *MASKS], ids=lambda f: f.get("name") or str(f["mask"]))
def test_visible_pairs_are_exact(fields: dict[str, Any]) -> None:
    spec = _spec(fields)
    args = _args(spec, 3, 2, 600)
    tensors, scalars = variant.numpy_args(variant_of(spec), args, 2)
    got = variant.visible_pairs(variant_of(spec), 3, 2, 600, 600, tensors, scalars)
    assert got == _brute_force(spec, 3, 2, 600, args)


def test_visible_pairs_closed_forms_and_flops() -> None:
    causal, chunked = variant_of(_spec({"mask": "causal"})), variant_of(_spec({"mask": {"kind": "chunked",
                                                                                        "chunk": 1024}}))
    s = 8192
    assert variant.visible_pairs(causal, 2, 3, s, s) == 6 * s * (s + 1) // 2
    assert variant.visible_pairs(chunked, 1, 1, s, s) == 8 * 1024 * 1025 // 2
    assert variant.visible_pairs(causal, 1, 1, 100, 300) == sum(range(201, 301))  # bottom-right aligned
    flops = variant.pass_flops(1000, 128)
    assert flops == {"fwd": 4 * 128 * 1000, "bwd": 2.5 * 4 * 128 * 1000, "fwdbwd": 3.5 * 4 * 128 * 1000}
    # the targets' case: chunk 8192 at 32k has about a quarter of causal's visible pairs (counted row block by block)
    big = variant_of(_spec({"mask": {"kind": "chunked", "chunk": 8192}}))
    assert variant.visible_pairs(big, 1, 1, 32768, 32768) == 4 * 8192 * 8193 // 2
    assert variant.visible_pairs(causal, 1, 1, 32768, 32768) / (4 * 8192 * 8193 // 2) == pytest.approx(4, rel=1e-3)


# ---- FlashAttention-4 keywords -------------------------------------------------------------------------------
FA4_PARAMS = ("causal", "window_size", "learnable_sink", "softcap")


def test_fa4_keywords() -> None:
    assert flex_equiv.fa4_kwargs(variant.load("gemma2_local_bf16_hd256"), FA4_PARAMS) == {
        "window_size": (4095, 0), "softcap": 50.0}
    assert flex_equiv.fa4_kwargs(variant.load("gpt_oss_bf16_hd64"), FA4_PARAMS) == {
        "window_size": (127, 0), "learnable_sink": True}
    assert flex_equiv.fa4_kwargs(variant.load("gemma2_global_bf16_hd256"), FA4_PARAMS) == {"causal": True,
                                                                                          "softcap": 50.0}
    assert flex_equiv.fa4_kwargs(_spec({"mask": {"kind": "sliding_window", "window": [-1, 64]}}), FA4_PARAMS) == {
        "window_size": (None, 64)}
    assert flex_equiv.fa4_kwargs(_spec({"mask": "none"}), FA4_PARAMS) == {}
    for name, why in (("llama4_chunked_bf16_hd128", "no chunked mask"), ("bloom_alibi_bf16_hd128", "no score mod"),
                      ("document_bf16_hd128", "no expr mask")):
        with pytest.raises(flex_equiv.Unavailable, match=why):
            flex_equiv.fa4_kwargs(variant.load(name), FA4_PARAMS)
    with pytest.raises(flex_equiv.Unavailable, match="takes no learnable_sink"):
        flex_equiv.fa4_kwargs(variant.load("gpt_oss_bf16_hd64"), ("causal", "window_size", "softcap"))


# ---- reports from a fake result ---------------------------------------------------------------------------------


def _entry(fwd: float, bwd: float | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"status": "ok", "check": {"fwd_err": 3e-3}, "fwd_ms": fwd, "fwd_tflops": 500.0}
    if bwd is not None:
        e.update(bwd_ms=bwd, bwd_tflops=400.0, fwdbwd_ms=fwd + bwd, fwdbwd_tflops=420.0,
                 check={"fwd_err": 3e-3, "grad_err": {"dq": 4e-3}})
    return e


def fake_results() -> dict[str, Any]:
    impls = {"attngen": _entry(1.0, 2.0), "plain": _entry(4.0, 8.4), "flex": _entry(1.5, 3.3),
             "fa4": {"status": "unavailable", "error": "FlashAttention-4 has no chunked mask"}}
    row = {"spec": "llama4_chunked_bf16_hd128", "plain": "causal_bf16_hd128", "seqlen": 32768, "batch": 1,
           "heads": 16, "head_dim": 128, "dtype": "bf16", "visible_pairs": 10, "density": 0.125, "impls": impls,
           "ratios": variant.ratios(impls), "attngen_vs_flex_err": 2e-3,
           "tiles": {"variant": {"empty": 0.873, "partial": 0.004, "full": 0.123, "block_m": 128, "block_n": 128},
                     "plain": {"empty": 0.496, "partial": 0.004, "full": 0.5, "block_m": 128, "block_n": 128},
                     "expected_plain_over_variant": 0.504 / 0.127}}
    env = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-23", "torch": "2.11", "triton": "3.6", "attngen": "0"}
    return {"environment": env, "settings": {"flops": "4 * head_dim per visible pair"}, "rows": [row]}


def test_ratios() -> None:
    r = fake_results()["rows"][0]["ratios"]
    assert r["variant/plain"] == {"fwd": 0.25, "bwd": pytest.approx(2 / 8.4), "fwdbwd": pytest.approx(3 / 12.4)}
    assert r["flex/attngen"]["fwd"] == 1.5 and r["flex/attngen"]["fwdbwd"] == pytest.approx(1.6)
    assert r["fa4/attngen"] == {"fwd": None, "bwd": None, "fwdbwd": None}


def test_report_files_and_lines(tmp_path: Path) -> None:
    results = fake_results()
    paths = variant.write(results, tmp_path)
    assert [p.name for p in paths] == ["variant.json", "variant.md"]
    assert json.loads(paths[0].read_text())["rows"][0]["ratios"]["variant/plain"]["fwd"] == 0.25
    md = paths[1].read_text()
    assert "| llama4_chunked_bf16_hd128 | 32768 | x0.25 x0.24 x0.24 | x1.50 x1.65 x1.60 | - - - | 87.3% | x3.97 |" \
        in md
    assert "| llama4_chunked_bf16_hd128 | 32768 | fa4 | - | - | - | - | - | - | unavailable |" in md
    row = results["rows"][0]
    assert variant.impl_line(row, "attngen").startswith(
        "llama4_chunked_bf16_hd128 s32k attngen  fwd 1.000 ms 500 TFLOP/s, bwd 2.000 ms 400 TFLOP/s, fwdbwd")
    assert "UNAVAILABLE: FlashAttention-4 has no chunked mask" in variant.impl_line(row, "fa4")
    line = variant.summary_line(row)
    assert "variant/plain fwd x0.25" in line and "flex/attngen fwd x1.50" in line and "expected x3.97" in line


# ---- command line -----------------------------------------------------------------------------------------------


def test_cli_variant_option() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0 and "--variant" in result.output
    result = runner.invoke(app, ["bench", "--variant", "no_such_spec"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "no catalogue spec" in result.output
    result = runner.invoke(app, ["bench", "--variant", "gpt_oss_bf16_hd64", "--seqlens", "0"])
    assert result.exit_code == 2 and "--seqlens" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_cli_variant_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    real_run = variant.run

    def fake_run(specs: Any, seqlens: Any, out: Any, log: Any) -> Any:
        seen.update(specs=[s.name for s in specs], seqlens=seqlens)
        return real_run(specs, seqlens, out, log)

    monkeypatch.setattr(variant, "run", fake_run)
    result = CliRunner().invoke(app, ["bench", "--variant", "gpt_oss_bf16_hd64", "--variant",
                                      "llama4_chunked_bf16_hd128", "--seqlens", "8k,32k"])
    assert result.exit_code == 1 and "needs a CUDA GPU" in result.output
    assert seen == {"specs": ["gpt_oss_bf16_hd64", "llama4_chunked_bf16_hd128"], "seqlens": (8192, 32768)}
    result = CliRunner().invoke(app, ["bench", "--variant", "gpt_oss_bf16_hd64"])
    assert seen["seqlens"] == (8192,) and math.isfinite(seen["seqlens"][0])


# ---- the check against attngen.reference, with a CPU stand-in for a kernel ----------------------------------------


def _naive_kernel(spec: AttentionSpec, broken: bool = False) -> Any:
    """Attention in float32 torch through the translated mods (differentiable on the CPU), called like attngen's
    kernel: kernel(q, k, v, **args) with (batch, seqlen, heads, head_dim) tensors."""
    var = variant_of(spec)

    def kernel(q: Any, k: Any, v: Any, **args: Any) -> Any:
        b, s, h, d = q.shape
        closure = flex_equiv.closure_of(var, args, s, s, h, "cpu")
        rows, cols = torch.arange(s)[:, None], torch.arange(s)[None, :]
        bi, hi = torch.arange(b)[:, None, None, None], torch.arange(h)[None, :, None, None]
        score = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) / math.sqrt(d)
        if var.score_mod is not None:
            score = flex_equiv.score_mod(var.score_mod.parsed(), closure)(score, bi, hi, rows, cols)
        seen = flex_equiv.mask_mod(var.mask.parsed(), closure)(bi, hi, rows, cols)
        score = score.masked_fill(~seen, -math.inf)
        if "sinks" in args:
            sink = args["sinks"][None, :, None, None].expand(b, h, s, 1)
            p = torch.cat([score, sink], dim=-1).softmax(-1)[..., :-1]
        else:
            p = score.softmax(-1)
        out = torch.einsum("bhqk,bkhd->bqhd", p, v.float()).to(q.dtype)
        return out * 0 if broken else out

    return kernel


def test_check_against_the_reference_output_and_gradients() -> None:
    spec = _spec({"mask": {"kind": "sliding_window", "window": [20, 0]}, "score_mod": {"softcap": 5.0},
                  "sinks": "learnable"})
    gen = torch.Generator().manual_seed(8)
    q, k, v, dout = (torch.randn(2, 96, 3, 64, generator=gen).bfloat16() for _ in range(4))
    x = flex_equiv.Inputs(q, k, v, dout, variant.make_args(variant_of(spec), 2, 3, 96, 96, "cpu", gen))
    result = variant.check(variant.prepare("attngen", spec, _naive_kernel(spec), x), spec, x, "bf16")
    assert result["fwd_err"] < 1e-2 and set(result["grad_err"]) == {"dq", "dk", "dv", "dsinks"}
    assert max(result["grad_err"].values()) < 2e-2 and "error" not in result and "bwd_error" not in result
    bad = variant.check(variant.prepare("attngen", spec, _naive_kernel(spec, broken=True), x), spec, x, "bf16")
    assert bad["fwd_err"] == pytest.approx(1.0) and "over 0.02" in bad["error"]
    plain = variant.plain_of(spec)
    got = variant.check(variant.prepare("plain", plain, _naive_kernel(plain), x), plain, x, "bf16")
    assert set(got["grad_err"]) == {"dq", "dk", "dv"} and got["fwd_err"] < 1e-2
    failed = variant.measure_impl("attngen", spec, RuntimeError("NVRTC said no"), x, x)
    assert failed == {"status": "failed", "error": "RuntimeError: NVRTC said no"}
