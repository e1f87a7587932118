"""The Transformers backend on the CPU: each layer's configuration as kernel options, the registration and its
errors, the padded and packed batch plumbing, and (when transformers is importable) tiny random-weight models
from Llama, Mistral, Qwen2, Gemma 2 and gpt-oss configs whose logits and greedy generations with
attn_implementation="attngen" match "eager" in float32. The kernels are tests/fake_kernel.py's: the spec's own
float64 reference behind the runtime's calling contract."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from attngen.compat import kernels
from attngen.integrations import transformers as backend

torch = pytest.importorskip("torch")

from . import fake_kernel  # noqa: E402


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fake_kernel.install(monkeypatch)
    yield
    kernels.clear_cache()


# ---- a layer's configuration as kernel options ------------------------------------------------------------

@pytest.mark.parametrize(("kw", "window", "softcap", "sinks"), [
    ({"causal": True}, (-1, 0), 0.0, False),
    ({"causal": False}, (-1, -1), 0.0, False),
    ({"causal": True, "sliding_window": 4096, "softcap": 50.0}, (4095, 0), 50.0, False),
    ({"causal": False, "sliding_window": 8}, (7, 7), 0.0, False),
    ({"causal": True, "sliding_window": 128, "sinks": True}, (127, 0), 0.0, True),
    ({"causal": True, "sliding_window": None, "softcap": None}, (-1, 0), 0.0, False),
])
def test_layer_options(kw: dict[str, Any], window: tuple[int, int], softcap: float, sinks: bool) -> None:
    options = backend.layer_options(128, "bfloat16", **kw)
    assert (options.window, options.softcap, options.sinks) == (window, softcap, sinks)
    assert options.head_dim == 128 and options.alibi == "none" and not options.deterministic


def test_register_without_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="pip install transformers"):
        backend.register()


def test_register_refuses_an_old_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="4.46.1"))
    with pytest.raises(ImportError, match=r"transformers >= 5\.0, found 4\.46\.1"):
        backend.register()
    assert backend.version_tuple("5.17.0.dev0") == (5, 17)


# ---- the attention function's plumbing --------------------------------------------------------------------

def layer(b: int, sq: int, sk: int, h: int = 4, kvh: int = 2, seed: int = 0) -> tuple[Any, Any, Any]:
    """query, key, value as Transformers passes them: (batch, heads, seqlen, head_dim)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, sq, 64, generator=gen), torch.randn(b, kvh, sk, 64, generator=gen),
            torch.randn(b, kvh, sk, 64, generator=gen))


def eager(q: Any, k: Any, v: Any, visible: Any, scale: float) -> Any:
    """float64 attention with a (batch, sq, sk) visibility, (batch, sq, heads, d) out; rows that see nothing 0."""
    group = q.shape[1] // k.shape[1]
    s = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double().repeat_interleave(group, 1)) * scale
    p = torch.softmax(s.masked_fill(~visible[:, None], -torch.inf), -1).nan_to_num(0.0)
    return torch.einsum("bhqk,bhkd->bqhd", p, v.double().repeat_interleave(group, 1))


def causal_visible(mask: Any, sq: int) -> Any:
    """Left-padded causal visibility: query i (the last sq positions) sees real keys up to its own position."""
    sk = mask.shape[1]
    pos = torch.arange(sk)
    return (pos[None, None, :] <= pos[-sq:][None, :, None]) & mask[:, None, :].bool()


def test_dense_call_is_causal_bottom_right(fake: None) -> None:
    q, k, v = layer(2, 3, 8)
    module = types.SimpleNamespace(is_causal=True)
    out, weights = backend.attention_forward(module, q, k, v, None, scaling=0.3)
    assert weights is None and fake_kernel.CALLS == ["dense"]
    want = eager(q, k, v, causal_visible(torch.ones(2, 8), 3), 0.3)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_padded_batch_is_unpadded(fake: None) -> None:
    q, k, v = layer(3, 6, 6, seed=1)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    out, _ = backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, mask.bool(), scaling=0.125)
    assert fake_kernel.CALLS == ["varlen"]
    want = eager(q, k, v, causal_visible(mask, 6), 0.125)
    real = mask.bool()
    torch.testing.assert_close(out.double()[real], want[real], rtol=1e-5, atol=1e-5)
    assert torch.equal(out[~real], torch.zeros_like(out[~real]))


def test_padded_decode_step_sees_each_rows_real_keys(fake: None) -> None:
    q, k, v = layer(2, 1, 7, seed=2)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    out, _ = backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, mask, scaling=0.125,
                                       sliding_window=3)
    visible = causal_visible(mask, 1) & (torch.arange(7) >= 4)
    torch.testing.assert_close(out.double(), eager(q, k, v, visible, 0.125), rtol=1e-5, atol=1e-5)


def test_packed_batch_from_position_ids(fake: None) -> None:
    q, k, v = layer(1, 9, 9, seed=3)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 0, 1, 2]])
    out, _ = backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, None, scaling=0.125,
                                       position_ids=positions)
    assert fake_kernel.CALLS == ["varlen"]
    doc = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    visible = (doc[:, None] == doc[None, :]) & (torch.arange(9)[None, :] <= torch.arange(9)[:, None])
    torch.testing.assert_close(out.double(), eager(q, k, v, visible[None], 0.125), rtol=1e-5, atol=1e-5)


def test_positions_that_continue_are_not_packed(fake: None) -> None:
    q, k, v = layer(1, 4, 10, seed=4)
    backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, None,
                              position_ids=torch.arange(6, 10)[None])
    assert fake_kernel.CALLS == ["dense"]


def test_sinks_go_to_the_kernel_in_fp32(fake: None) -> None:
    q, k, v = layer(1, 5, 5, seed=5)
    sinks = torch.randn(4, dtype=torch.bfloat16)
    out, _ = backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, None, scaling=0.125,
                                       s_aux=sinks)
    s = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double().repeat_interleave(2, 1)) * 0.125
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -torch.inf)
    sink = sinks.double()[None, :, None, None].expand(1, 4, 5, 1)
    p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
    want = torch.einsum("bhqk,bhkd->bqhd", p, v.double().repeat_interleave(2, 1))
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    assert kernels.cached_options()[0].sinks


def test_float32_runs_in_the_autocast_dtype(fake: None) -> None:
    q, k, v = layer(1, 5, 5, seed=6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, None)
    assert out.dtype == torch.bfloat16 and kernels.cached_options()[0].dtype == "bfloat16"


def test_float32_without_autocast_is_refused_with_a_remedy() -> None:
    kernels.clear_cache()
    q, k, v = layer(1, 5, 5)
    with pytest.raises(ValueError, match=r"torch.float32; .*dtype=torch.bfloat16"):
        backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, None)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"dropout": 0.1}, "dropout must be 0.0"),
    ({"attention_mask": torch.zeros(1, 1, 5, 5)}, "2D padding mask"),
])
def test_attention_forward_refuses_by_name(fake: None, kw: dict[str, Any], needle: str) -> None:
    q, k, v = layer(1, 5, 5)
    kw = {"attention_mask": None, **kw}
    with pytest.raises(ValueError, match=needle):
        backend.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, **kw)


# ---- tiny models against eager ------------------------------------------------------------------------------

from .transformers_models import MODELS, build, greedy, packed_logits  # noqa: E402


@pytest.fixture
def transformers(fake: None) -> Any:
    module = pytest.importorskip("transformers", reason="transformers is not installed (the backend's model tests "
                                 "need it; attngen does not depend on it)")
    backend.register()
    return module


@pytest.mark.parametrize("name", MODELS)
def test_logits_match_eager(transformers: Any, name: str) -> None:
    model, ids = build(transformers, name, torch.float32)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        want = [model(ids).logits, model(ids, attention_mask=mask).logits]
        model.set_attn_implementation("attngen")
        got = [model(ids).logits, model(ids, attention_mask=mask).logits]
    assert fake_kernel.CALLS.count("dense") == model.config.num_hidden_layers
    assert fake_kernel.CALLS.count("varlen") == model.config.num_hidden_layers
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    real = mask.bool()
    torch.testing.assert_close(got[1][real], want[1][real], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_packed_batch_matches_separate_sequences(transformers: Any, name: str) -> None:
    model, ids = build(transformers, name, torch.float32)
    model.set_attn_implementation("attngen")
    got, want = packed_logits(model, ids, lengths=(5, 11, 7))
    assert "varlen" in fake_kernel.CALLS
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generate_matches_eager(transformers: Any, name: str) -> None:
    model, ids = build(transformers, name, torch.float32)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    want = greedy(model, ids, mask, steps=8)
    model.set_attn_implementation("attngen")
    got = greedy(model, ids, mask, steps=8)
    assert fake_kernel.CALLS and set(fake_kernel.CALLS) <= {"dense", "varlen"}
    assert torch.equal(got, want)
