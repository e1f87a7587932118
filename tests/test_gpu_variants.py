"""GPU tests of the variant language: masks, score mods and sinks, forward (out, LSE) and gradients (q, k, v,
sinks), against the float64 reference of the spec's own expressions (attngen.reference), with FlexAttention
as a second oracle and flash_attn's softcap cases.

Run on a machine with a CUDA device: `python -m pytest -m gpu`.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
import attngen.runtime.kernel  # noqa: E402
from attngen.catalogue import load_catalogue  # noqa: E402
from attngen.features.variant import variant_of  # noqa: E402
from attngen.spec.model import AttentionSpec, DType, PipelineKind  # noqa: E402

from .gpu_reference import lse_error, relative_error  # noqa: E402

pytestmark = pytest.mark.gpu

TOLERANCE = {DType.fp16: 4e-3, DType.bf16: 2e-2}
GRAD_TOLERANCE = {DType.fp16: 8e-3, DType.bf16: 3e-2}
LSE_TOLERANCE = 2e-3
#: (batch, seqlen_q, seqlen_k, heads, kv_heads): odd lengths, GQA, seqlen_q != seqlen_k both ways.
SHAPES = [(2, 333, 333, 4, 2), (1, 129, 700, 4, 1), (1, 700, 129, 2, 2)]

CUSTOM = [
    {"head_dim": 128, "dtype": "bf16", "mask": {"kind": "chunked", "chunk": 128}},
    {"head_dim": 64, "dtype": "fp16", "mask": {"kind": "sliding_window", "window": [64, 0]},
     "score_mod": {"softcap": 20.0}},
    {"head_dim": 128, "dtype": "fp16", "mask": "causal", "sinks": "learnable"},
    {"head_dim": 64, "dtype": "bf16", "mask": "none", "score_mod": {"alibi": "runtime"}},
    {"head_dim": 128, "dtype": "bf16", "mask": "prefix_lm"},
    {"head_dim": 64, "dtype": "fp16", "name": "streaming_small",
     "mask": {"expr": "kv_idx <= q_idx + sk - sq and (q_idx + sk - sq - kv_idx <= 100 or kv_idx < 4)"}},
    {"head_dim": 128, "dtype": "bf16", "name": "streaming_per_head",   # holes that differ between GQA heads
     "mask": {"expr": "kv_idx <= q_idx + sk - sq and (q_idx + sk - sq - kv_idx <= 64 + 128 * (h % 2) or kv_idx < 4)"}},
    {"head_dim": 128, "dtype": "bf16", "name": "rel_bias", "mask": "causal",
     "score_mod": {"expr": "score + bias[h, min(abs(q_idx - kv_idx), 1023)]",
                   "tensors": {"bias": {"dtype": "fp32", "shape": ["heads", 1024]}}}},
    {"head_dim": 96, "dtype": "fp16", "mask": "causal", "score_mod": {"softcap": 30.0}, "sinks": "learnable"},
    {"head_dim": 192, "dtype": "bf16", "mask": {"kind": "chunked", "chunk": 128}, "score_mod": {"alibi": "runtime"}},
    {"head_dim": 64, "dtype": "fp16", "name": "head_mask_scalar",
     "mask": {"expr": "h % 2 == 0 or kv_idx <= q_idx + sk - sq"},
     "score_mod": {"expr": "score * temp - 0.5 * sigmoid(score)", "scalars": {"temp": {"dtype": "fp32"}}}},
]
VARIANTS = [s for s in load_catalogue() if not s.is_plain] + [AttentionSpec(**c) for c in CUSTOM]
_KERNELS: dict[str, attngen.AttentionKernel] = {}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")


def _kernel(spec: AttentionSpec) -> attngen.AttentionKernel:
    if spec.name not in _KERNELS:
        _KERNELS[spec.name] = attngen.compile(spec)
    return _KERNELS[spec.name]


def _with_pipeline(spec: AttentionSpec, pipeline: str) -> AttentionSpec | None:
    arch = attngen.runtime.kernel.current_arch()
    if pipeline == "warp_specialized" and (arch.value != "sm90" or spec.head_dim % 64):
        return None
    if pipeline == "auto":
        return spec
    return spec.model_copy(update={"name": f"{spec.name}_{pipeline}",
                                   "pipeline": spec.pipeline.model_copy(update={"kind": PipelineKind(pipeline)})})


def _args(spec: AttentionSpec, shape: tuple[int, ...], gen: Any) -> dict[str, Any]:
    """Fresh random runtime arguments for every tensor and scalar the spec declares."""
    b, sq, sk, h, _ = shape
    out: dict[str, Any] = {}
    for arg in variant_of(spec).arguments():
        if arg.computed:
            continue
        if arg.name == "sinks":
            out[arg.name] = torch.randn(h, device="cuda", generator=gen).requires_grad_()
        elif arg.name == "prefix_len":
            out[arg.name] = torch.randint(0, sk + 1, (b,), device="cuda", generator=gen, dtype=torch.int32)
        elif arg.name == "doc":
            cuts = torch.rand(b, sq, device="cuda", generator=gen) < 0.01
            out[arg.name] = torch.cumsum(cuts.int(), dim=1).to(torch.int32)
        elif arg.name == "alibi_slopes":
            out[arg.name] = torch.rand(h, device="cuda", generator=gen) * 0.1
        elif arg.is_tensor:
            shp = [d if isinstance(d, int) else {"batch": b, "heads": h, "seqlen_q": sq, "seqlen_k": sk}[d]
                   for d in arg.decl.shape]
            out[arg.name] = torch.randn(*shp, device="cuda", generator=gen) * 0.5
        else:
            out[arg.name] = 0.7
    return out


def _inputs(spec: AttentionSpec, shape: tuple[int, ...], seed: int) -> tuple[Any, ...]:
    b, sq, sk, h, kvh = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = torch.float16 if spec.dtype is DType.fp16 else torch.bfloat16
    q, dout = (torch.randn(b, sq, h, spec.head_dim, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    k, v = (torch.randn(b, sk, kvh, spec.head_dim, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    return q, k, v, dout, _args(spec, shape, gen)


def _check_forward(spec: AttentionSpec, q: Any, k: Any, v: Any, args: dict[str, Any]) -> None:
    out, lse = _kernel(spec)(q, k, v, return_lse=True, **args)
    torch.cuda.synchronize()
    ref_out, ref_lse = attngen.reference(spec, q, k, v, **args)
    err = relative_error(out, torch.from_numpy(ref_out).cuda())
    lerr = lse_error(lse, torch.from_numpy(ref_lse).cuda())
    where = f"{spec.name} q{tuple(q.shape)} k{tuple(k.shape)}"
    print(f"fwd {where}: rel err {err:.2e}, lse err {lerr:.2e}")
    assert err < TOLERANCE[spec.dtype], f"{where}: rel err {err:.2e}"
    assert lerr < LSE_TOLERANCE, f"{where}: lse err {lerr:.2e}"


def _check_backward(spec: AttentionSpec, q: Any, k: Any, v: Any, dout: Any, args: dict[str, Any]) -> None:
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = _kernel(spec)(q, k, v, **args)
    (out * dout).sum().backward()
    want = attngen.reference.grads(spec, q, k, v, dout, **args)
    got = {"dq": q.grad, "dk": k.grad, "dv": v.grad}
    if "sinks" in args:
        got["dsinks"] = args["sinks"].grad
    assert set(got) == set(want)
    for name, g in got.items():
        err = relative_error(g, torch.from_numpy(want[name]).cuda())
        print(f"bwd {spec.name} q{tuple(q.shape)} {name}: rel err {err:.2e}")
        assert err < GRAD_TOLERANCE[spec.dtype], f"{spec.name} q{tuple(q.shape)} {name}: rel err {err:.2e}"


@pytest.mark.parametrize("pipeline", ["auto", "multistage", "warp_specialized"])
@pytest.mark.parametrize("spec", VARIANTS, ids=lambda s: s.name)
def test_variant_forward_and_gradients(spec: AttentionSpec, pipeline: str) -> None:
    chosen = _with_pipeline(spec, pipeline)
    if chosen is None:
        pytest.skip("warp_specialized needs sm90 and a head dim that is a multiple of 64")
    for i, shape in enumerate(SHAPES):
        q, k, v, dout, args = _inputs(chosen, shape, seed=100 + i)
        _check_forward(chosen, q, k, v, args)
        if pipeline != "warp_specialized":   # multistage's backward is sm80_bwd's on every arch (atomic dQ)
            _check_backward(chosen, q, k, v, dout, args)


def test_runtime_arguments_are_validated() -> None:
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="prefix_lm", sinks="learnable")
    kernel = _kernel(spec)
    q, k, v, _, args = _inputs(spec, (2, 64, 64, 4, 4), seed=5)
    with pytest.raises(ValueError, match="missing keyword argument 'prefix_len'"):
        kernel(q, k, v, sinks=args["sinks"])
    with pytest.raises(ValueError, match=r"prefix_len must be a torch.int32 tensor of shape \[2\]"):
        kernel(q, k, v, sinks=args["sinks"], prefix_len=args["prefix_len"].long())
    with pytest.raises(ValueError, match=r"sinks must be a torch.float32 tensor of shape \[4\]"):
        kernel(q, k, v, sinks=args["sinks"][:2], prefix_len=args["prefix_len"])
    with pytest.raises(ValueError, match="unexpected keyword argument 'doc'"):
        kernel(q, k, v, doc=args["prefix_len"], **args)


# ---- FlexAttention as a second oracle --------------------------------------------------------------
def _flex(q: Any, k: Any, v: Any, score_mod: Any = None, mask_mod: Any = None) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, sq, h, _ = q.shape
    block = create_block_mask(mask_mod, b, h, sq, k.shape[1], device="cuda") if mask_mod else None
    out = flex_attention(*(t.transpose(1, 2) for t in (q, k, v)), score_mod=score_mod, block_mask=block,
                         enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


def test_against_flex_attention() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    shape = (2, 512, 512, 4, 2)

    def causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return kv_idx <= q_idx

    def softcap(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return 30.0 * torch.tanh(score / 30.0)

    def chunked(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (q_idx // 128 == kv_idx // 128) & (kv_idx <= q_idx)

    cases = [
        ({"mask": "causal", "score_mod": {"softcap": 30.0}}, softcap, causal),
        ({"mask": {"kind": "chunked", "chunk": 128}}, None, chunked),
    ]
    for i, (fields, score_mod, mask_mod) in enumerate(cases):
        spec = AttentionSpec(head_dim=128, dtype="bf16", **fields)
        q, k, v, _, args = _inputs(spec, shape, seed=40 + i)
        ours = _kernel(spec)(q, k, v, **args)
        theirs = _flex(q, k, v, score_mod, mask_mod)
        err = relative_error(ours, theirs.double())
        print(f"flex {spec.name}: rel err {err:.2e}")
        assert err < TOLERANCE[spec.dtype], f"{spec.name} against FlexAttention: {err:.2e}"


# ---- flash_attn's softcap cases (tests/test_flash_attn.py: softcap 50, causal and not) -------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("seqlens", [(113, 203), (128, 217), (256, 512), (1023, 1024)])
def test_flash_attn_softcap_cases(causal: bool, head_dim: int, seqlens: tuple[int, int]) -> None:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none",
                         score_mod={"softcap": 50.0})
    sq, sk = seqlens
    q, k, v, dout, args = _inputs(spec, (2, sq, sk, 6, 2), seed=sq + head_dim)
    q, k, v = (t * 4 for t in (q, k, v))  # logits large enough that the cap bends them
    _check_forward(spec, q, k, v, args)
    if math.prod(seqlens) <= 256 * 512:
        _check_backward(spec, q, k, v, dout, args)
