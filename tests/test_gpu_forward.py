"""GPU tests of the forward kernel: every catalogue spec against a float64 reference.

Run on a machine with a CUDA device: `python -m pytest -m gpu`. Outputs are poisoned with NaN
before every launch (ATTNGEN_POISON=1) so an unwritten element fails.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
import attngen.runtime.kernel  # noqa: E402
from attngen.catalogue import load_catalogue  # noqa: E402
from attngen.spec.model import AttentionSpec, DType, PipelineKind  # noqa: E402

from .gpu_reference import lse_error, reference, relative_error  # noqa: E402

pytestmark = pytest.mark.gpu

TOLERANCE = {DType.fp16: 2e-3, DType.bf16: 1e-2}
LSE_TOLERANCE = 1e-3
#: (batch, seqlen_q, seqlen_k, heads, kv_heads)
SHAPES = [
    (2, 1, 1, 4, 4),
    (2, 17, 17, 8, 1),
    (1, 1000, 1000, 4, 4),
    (1, 4097, 4097, 2, 2),
    (1, 17, 1000, 8, 1),
    (1, 1000, 17, 4, 2),
    (1, 1000, 4097, 8, 1),
]
# The window-shaped catalogue specs; the variants (score mods, sinks, other masks): test_gpu_variants.py.
CATALOGUE = [spec for spec in load_catalogue() if spec.is_plain]


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")


@pytest.fixture(scope="module")
def kernels() -> dict[str, attngen.AttentionKernel]:
    return {}


def _kernel(kernels: dict, spec: AttentionSpec) -> attngen.AttentionKernel:
    if spec.name not in kernels:
        kernels[spec.name] = attngen.compile(spec)
    return kernels[spec.name]


def _inputs(spec: AttentionSpec, shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    b, sq, sk, h, kvh = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[spec.dtype.value])
    q = torch.randn(b, sq, h, spec.head_dim, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(b, sk, kvh, spec.head_dim, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(b, sk, kvh, spec.head_dim, device="cuda", dtype=dtype, generator=gen)
    return q, k, v


def _check(spec: AttentionSpec, kernel: attngen.AttentionKernel, q, k, v, scale=None) -> None:  # type: ignore[no-untyped-def]
    out, lse = kernel(q, k, v, softmax_scale=scale, return_lse=True)
    torch.cuda.synchronize()
    ref_out, ref_lse = reference(q, k, v, spec.window_left, spec.window_right, scale)
    err = relative_error(out, ref_out)
    lerr = lse_error(lse, ref_lse)
    print(f"fwd {spec.name} q{tuple(q.shape)} k{tuple(k.shape)}: rel err {err:.2e}, lse err {lerr:.2e}")
    assert err < TOLERANCE[spec.dtype], f"{spec.name} {tuple(q.shape)} {tuple(k.shape)}: rel err {err:.2e}"
    assert lerr < LSE_TOLERANCE, f"{spec.name} {tuple(q.shape)} {tuple(k.shape)}: lse err {lerr:.2e}"


@pytest.mark.parametrize("pipeline", ["auto", "multistage", "warp_specialized"])
@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_catalogue_against_float64(spec: AttentionSpec, pipeline: str, kernels: dict) -> None:
    """Every catalogue spec with each strategy the GPU has: auto (ping-pong on sm90 where it serves the
    spec), multistage (mma.sync), and warp_specialized without ping-pong."""
    arch = attngen.runtime.kernel.current_arch()
    if pipeline == "warp_specialized" and (arch.value != "sm90" or spec.head_dim % 64):
        pytest.skip(f"warp_specialized needs sm90 and a head dim that is a multiple of 64 ({arch.value}, "
                    f"hd{spec.head_dim})")
    if pipeline != "auto":
        spec = spec.model_copy(update={"name": f"{spec.name}_{pipeline}",
                                       "pipeline": spec.pipeline.model_copy(update={"kind": PipelineKind(pipeline)})})
    kernel = _kernel(kernels, spec)
    for i, shape in enumerate(SHAPES):
        q, k, v = _inputs(spec, shape, seed=1000 + i)
        _check(spec, kernel, q, k, v)


@pytest.mark.parametrize("window", [(0, 0), (5, 3), (64, -1), (-1, 7), (300, 0)])
@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
def test_windows_and_head_dims(window: tuple[int, int], head_dim: int, kernels: dict) -> None:
    spec = AttentionSpec(name=f"w{window[0]}_{window[1]}_hd{head_dim}", head_dim=head_dim, dtype="fp16",
                         mask="sliding_window", window=window)
    kernel = _kernel(kernels, spec)
    for i, shape in enumerate([(1, 333, 333, 4, 2), (1, 129, 700, 2, 1), (1, 700, 129, 2, 2)]):
        q, k, v = _inputs(spec, shape, seed=7 + i)
        _check(spec, kernel, q, k, v)


def test_strided_inputs_and_scale(kernels: dict) -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    kernel = _kernel(kernels, spec)
    gen = torch.Generator(device="cuda").manual_seed(3)
    qkv = torch.randn(2, 777, 3, 6, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v = qkv.unbind(dim=2)  # strided views with a contiguous last dim
    _check(spec, kernel, q, k, v, scale=0.05)
    qt = torch.randn(2, 6, 777, 128, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
    _check(spec, kernel, qt, k, v)


def test_torch_compile_fullgraph(kernels: dict) -> None:
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="causal")
    kernel = _kernel(kernels, spec)

    class Block(torch.nn.Module):
        def forward(self, q, k, v):  # type: ignore[no-untyped-def]
            return kernel(q * 1.0, k, v) + 1.0

    q, k, v = _inputs(spec, (2, 300, 300, 4, 2), seed=11)
    eager = Block()(q, k, v)
    compiled = torch.compile(Block(), fullgraph=True)(q, k, v)
    torch.cuda.synchronize()
    assert torch.isfinite(compiled.float()).all()
    assert torch.equal(eager, compiled)


def test_python_level_mistakes_raise_value_error(kernels: dict) -> None:
    spec = AttentionSpec(head_dim=64, dtype="bf16")
    kernel = _kernel(kernels, spec)
    q, k, v = _inputs(spec, (1, 64, 64, 4, 2), seed=5)
    cases = [
        ((q.half(), k, v), "dtype"),
        ((q[..., :32], k, v), "head_dim"),
        ((q.cpu(), k, v), "CUDA"),
        ((q[0], k, v), "4 dims"),
        ((q, k[:, :, :1].expand(1, 64, 3, 64), v), "shape"),
        ((q[:0], k[:0], v[:0]), "batch"),
        ((q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v), "contiguous"),
    ]
    for args, word in cases:
        with pytest.raises(ValueError, match=word):
            kernel(*args)
    with pytest.raises(ValueError, match="softmax_scale"):
        kernel(q, k, v, softmax_scale=-1.0)
    torch.cuda.synchronize()


def test_misaligned_inputs_are_handled(kernels: dict) -> None:
    """A view starting off a 16-byte boundary is copied, never faulted on."""
    spec = AttentionSpec(head_dim=64, dtype="bf16")
    kernel = _kernel(kernels, spec)
    gen = torch.Generator(device="cuda").manual_seed(21)
    flat = torch.randn(1 + 2 * 100 * 4 * 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    q = flat[1:].view(2, 100, 4, 64)  # data_ptr is 2 bytes past an aligned address
    assert q.data_ptr() % 16 != 0
    k = torch.randn(2, 90, 4, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    _check(spec, kernel, q, k, k.clone())


def test_broadcast_inputs_forward_and_backward(kernels: dict) -> None:
    """Stride-0 views (one K/V head broadcast to all, a query repeated over the batch) run through
    every pipeline: TMA cannot address them, so they go in as copies; gradients flow back."""
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    kernel = _kernel(kernels, spec)
    gen = torch.Generator(device="cuda").manual_seed(23)
    q = torch.randn(1, 300, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen).expand(2, 300, 4, 128)
    k1 = torch.randn(2, 257, 1, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    v1 = torch.randn(2, 257, 1, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = k1.expand(2, 257, 4, 128), v1.expand(2, 257, 4, 128)
    assert q.stride(0) == 0 and k.stride(2) == 0
    _check(spec, kernel, q, k, v)
    k1.requires_grad_()
    out = kernel(q, k1.expand(2, 257, 4, 128), v)
    (dk1,) = torch.autograd.grad(out, (k1,), torch.ones_like(out))
    q64, v64 = q.double(), v.double()
    k64 = k1.detach().double().requires_grad_()
    ref, _ = reference(q64, k64.expand(2, 257, 4, 128), v64, spec.window_left, spec.window_right)
    (ref_dk1,) = torch.autograd.grad(ref, (k64,), torch.ones_like(ref))
    err = relative_error(dk1, ref_dk1)
    print(f"bwd broadcast k: dk rel err {err:.2e}")
    assert err < 2e-2


def test_kernel_for_another_arch_is_refused() -> None:
    spec = AttentionSpec(name="other_arch", head_dim=64, dtype="bf16")
    here = attngen.runtime.kernel.current_arch()
    other = "sm80" if here.value != "sm80" else "sm90"
    kernel = attngen.compile(spec, arch=other)
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=f"built for {other}.*{here.value}"):
        kernel(q, q, q)


def test_empty_sequences(kernels: dict) -> None:
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="causal")
    kernel = _kernel(kernels, spec)
    q = torch.randn(1, 0, 2, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 5, 2, 64, device="cuda", dtype=torch.bfloat16)
    out, lse = kernel(q, k, k, return_lse=True)
    assert out.shape == q.shape and lse.shape == (1, 2, 0)
    q = torch.randn(1, 7, 2, 64, device="cuda", dtype=torch.bfloat16)
    k0 = torch.randn(1, 0, 2, 64, device="cuda", dtype=torch.bfloat16)
    out, lse = kernel(q, k0, k0, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


@pytest.mark.parametrize("poly", [False, True], ids=["mufu", "poly"])
@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_softmax_rescaling_paths(head_dim: int, mask: str, poly: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores whose row max grows along the keys, for the sm90 forward's conditional rescaling: heads 0-1 slowly (7
    log2 units over the whole row: below the threshold, so the sums run unrescaled up to 2^7), heads 2-3 in jumps of
    6 nats every 256 keys (past the threshold: the rescale runs). With the polynomial exp2 on part of the tiles too.
    The growth rides on dimension 0: q[..., 0] = 1, k[..., 0] = sqrt(d) x the ramp."""
    from attngen.families import sm90_fwd

    if poly:
        monkeypatch.setattr(sm90_fwd, "EXP2_POLY_TILES", {head_dim: 4})
    spec = AttentionSpec(name=f"rescale_hd{head_dim}_{mask}_{'poly' if poly else 'mufu'}", head_dim=head_dim,
                         dtype="bf16", mask=mask)
    kernel = attngen.compile(spec)
    seqlen = 1500
    gen = torch.Generator(device="cuda").manual_seed(head_dim + 2 * poly + (mask == "causal"))
    q, k, v = (torch.randn(1, seqlen, 4, head_dim, device="cuda", generator=gen) for _ in range(3))
    pos = torch.arange(seqlen, device="cuda", dtype=torch.float32)
    slow = 7 * 0.6931 * pos / seqlen
    jumps = 6.0 * torch.div(pos, 256, rounding_mode="floor")
    q[..., 0] = 1.0
    k[:, :, :2, 0] = head_dim ** 0.5 * slow[:, None]
    k[:, :, 2:, 0] = head_dim ** 0.5 * jumps[:, None]
    _check(spec, kernel, *(t.to(torch.bfloat16) for t in (q, k, v)))


@pytest.mark.parametrize("pipeline", ["auto", "warp_specialized"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_causal_tail_order_gives_the_same_output(head_dim: int, pipeline: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hopper forward's last chains dealt heaviest query block first (sm90_tail_order.FWD_TAIL_WAVES) give the
    output and LSE bitwise equal to the grid's own order (a block's work does not depend on when it runs), exact
    against float64. The first shape's tail is part of its chains (the remap's both sides), the second's all of them."""
    from attngen.families import sm90_tail_order
    from attngen.runtime.device import sm_count

    if attngen.runtime.kernel.current_arch().value != "sm90":
        pytest.skip("the tail order is the Hopper forward's")
    shapes = [(2, 4096, 4096, 8, 8), (1, 1000, 1000, 4, 2)]
    runs: dict[bool, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for tail in (False, True):
        with monkeypatch.context() as m:
            m.setattr(sm90_tail_order, "FWD_TAIL_WAVES", 2.0 if tail else 0.0)
            spec = AttentionSpec(name=f"fwd_tail{int(tail)}_hd{head_dim}_{pipeline}", head_dim=head_dim,
                                 dtype="bf16", mask="causal", pipeline=pipeline)
            kernel = attngen.compile(spec)
            plan = kernel.cubins[attngen.runtime.kernel.current_arch()].source.plan
            assert plan.tail_waves == (2.0 if tail else 0.0)
            runs[tail] = []
            for i, shape in enumerate(shapes):
                out, lse = kernel(*_inputs(spec, shape, seed=990 + i), return_lse=True)
                runs[tail].append((out, lse))
    b, s, _, h, _ = shapes[0]
    assert 2 <= sm90_tail_order.tail_chains(-(-s // plan.block_m), b * h, sm_count(0), 2.0) < b * h
    for shape, (out, lse), (want, want_lse) in zip(shapes, runs[True], runs[False], strict=True):
        assert out.isfinite().all(), f"{shape}: output not finite"
        assert torch.equal(out, want) and torch.equal(lse, want_lse), f"{shape}: differs from the grid order's"
    _check(spec, kernel, *_inputs(spec, (2, 1100, 1100, 4, 2), seed=9))


@pytest.mark.parametrize("mask", [{"mask": "causal"}, {"mask": "none"}, {"mask": "sliding_window", "window": [100, 0]},
                                  {"mask": "sliding_window", "window": [40, 70]}],
                         ids=["causal", "none", "window100", "window40_70"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_warpgroups_own_ranges_give_the_same_output(head_dim: int, mask: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each consumer warpgroup walking only its own rows' KV tiles (sm90_fwd.OWN_RANGES, with HALF_TILES: a first tile
    whose second half the warpgroup does not see at half width) gives the output and LSE
    bitwise equal to every warpgroup walking the block's range, dense and packed, exact against float64. The shapes
    leave a 192-row block (hd64) a warpgroup with no row (1000, 200), a causal block's first warpgroup tiles it does
    not see, and bottom-right offsets (sq < sk, sq > sk) that move both ends of a warpgroup's range under a window."""
    from attngen.families import sm90_fwd

    if attngen.runtime.kernel.current_arch().value != "sm90":
        pytest.skip("the warpgroups' own ranges are the Hopper forward's")
    shapes = [(1, 1000, 1000, 4, 2), (2, 200, 777, 4, 4), (1, 777, 200, 2, 1), (1, 2100, 2100, 2, 2)]
    lengths_q, lengths_k = [0, 17, 200, 700, 1, 450], [9, 40, 200, 300, 129, 1000]
    runs: dict[bool, list[torch.Tensor]] = {}
    for own in (False, True):
        with monkeypatch.context() as m:
            m.setattr(sm90_fwd, "OWN_RANGES", own)
            tag = mask["mask"] + "".join(f"_{w}" for w in mask.get("window", []))
            fields = {"name": f"own{int(own)}_hd{head_dim}_{tag}",
                      "head_dim": head_dim, "dtype": "bf16", "pipeline": "warp_specialized", **mask}
            spec = AttentionSpec(**fields)
            kernel = attngen.compile(spec)
            packed = attngen.compile(AttentionSpec(**{**fields, "name": fields["name"] + "_packed",
                                                      "seqlens": "varlen"}))
            plan = kernel.cubins[attngen.runtime.kernel.current_arch()].source.plan
            assert plan.roles is not None and plan.roles.own_ranges == own
            runs[own] = [t for i, shape in enumerate(shapes)
                         for t in kernel(*_inputs(spec, shape, seed=310 + i), return_lse=True)]
            gen = torch.Generator(device="cuda").manual_seed(31)
            q = torch.randn(sum(lengths_q), 4, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
            k, v = (torch.randn(sum(lengths_k), 2, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
                    for _ in range(2))
            cu_q, cu_k = (torch.tensor([0, *itertools.accumulate(n)], dtype=torch.int32, device="cuda")
                          for n in (lengths_q, lengths_k))
            runs[own] += list(packed(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lengths_q),
                                     max_seqlen_k=max(lengths_k), return_lse=True))
    for i, (got, want) in enumerate(zip(runs[True], runs[False], strict=True)):
        assert got.isfinite().any(), f"run {i}: nothing finite"
        assert torch.equal(got, want), f"run {i}: differs from the block's range"
    for i, shape in enumerate(shapes):
        _check(spec, kernel, *_inputs(spec, shape, seed=310 + i))
    ref_out, ref_lse = attngen.reference.varlen(packed.spec, q, k, v, cu_q, cu_k)
    assert relative_error(runs[True][-2], torch.from_numpy(ref_out).cuda()) < 2e-2
    assert lse_error(runs[True][-1], torch.from_numpy(ref_lse).cuda()) < 2e-3
