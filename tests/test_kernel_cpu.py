"""The op and the AttentionKernel front end, on the CPU: schema, fake tensors, argument checks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from attngen.codegen.renderer import render  # noqa: E402
from attngen.planning.planner import plan  # noqa: E402
from attngen.runtime import op  # noqa: E402
from attngen.runtime.kernel import AttentionKernel  # noqa: E402
from attngen.spec.model import Arch, AttentionSpec  # noqa: E402
from attngen.toolchain.artifacts import Cubin  # noqa: E402


@pytest.fixture(scope="module")
def kernel() -> AttentionKernel:
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="causal")
    source = render(plan(spec, "sm90"))
    fake = Cubin(source=source, data=b"", target="sm_90a", nvrtc_version="0", options=(), resources=(),
                 cache_key="0" * 64)
    return AttentionKernel(spec, {Arch.sm90: fake})


def test_op_schema() -> None:
    op.ensure_registered()
    schema = str(torch.ops.attngen.attention_fwd.default._schema)
    assert schema == ("attngen::attention_fwd(Tensor q, Tensor k, Tensor v, float softmax_scale, str kernel, "
                      "Tensor[] extras, float[] scalars, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
                      "Tensor? seqused_k, SymInt max_seqlen_q, SymInt max_seqlen_k) -> (Tensor, Tensor)")


def test_fake_tensor_shapes(kernel: AttentionKernel) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 33, 8, 64, dtype=torch.bfloat16)
        k = torch.empty(2, 70, 2, 64, dtype=torch.bfloat16)
        out, lse = op.attention_fwd(q, k, k, 0.125, kernel.key)
        assert out.shape == q.shape and out.dtype == q.dtype
        assert lse.shape == (2, 8, 33) and lse.dtype == torch.float32


def test_fake_tensor_shapes_packed(kernel: AttentionKernel) -> None:
    """Packed sequences: out like q (total_q, heads, head_dim), the LSE in flash_attn's (heads, total_q)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(45, 8, 64, dtype=torch.bfloat16)
        k = torch.empty(70, 2, 64, dtype=torch.bfloat16)
        cu = torch.empty(4, dtype=torch.int32)
        out, lse = op.attention_fwd(q, k, k, 0.125, kernel.key, seqs=(cu, cu, None, 20, 30))
        assert out.shape == q.shape and lse.shape == (8, 45) and lse.dtype == torch.float32


def _qkv(dtype=torch.bfloat16):  # type: ignore[no-untyped-def]
    q = torch.randn(1, 16, 4, 64, dtype=dtype)
    k = torch.randn(1, 16, 2, 64, dtype=dtype)
    return q, k, k.clone()


@pytest.mark.parametrize("mutate, needle", [
    (lambda q, k, v: ("not a tensor", k, v), "q must be a torch.Tensor"),
    (lambda q, k, v: (q, k, v), "must be a CUDA tensor"),
])
def test_bad_arguments_name_the_argument(kernel: AttentionKernel, mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=needle):
        kernel(*mutate(*_qkv()))


def test_kernel_describes_itself(kernel: AttentionKernel) -> None:
    assert kernel.arches == (Arch.sm90,)
    assert "causal_bf16_hd64" in repr(kernel) and "sm90" in repr(kernel)


def test_unknown_kernel_key_is_a_clear_error() -> None:
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="not loaded"):
        op._fwd_impl(q, k, v, 0.1, "no-such-kernel", [], [], (None, None, None, 0, 0))


def test_misaligned_views_are_copied_to_aligned_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    op.register_launcher("probe", lambda q, k, v, out, lse, scale, extras, scalars, seqs: seen.append((q, k, v)))
    flat = torch.randn(1 + 16 * 2 * 64, dtype=torch.bfloat16)
    q = flat[1:].view(1, 16, 2, 64)
    assert q.data_ptr() % 16 != 0 and q.is_contiguous()
    k = torch.randn(1, 16, 2, 64, dtype=torch.bfloat16)
    op._fwd_impl(q, k, k, 0.1, "probe", [], [], (None, None, None, 0, 0))
    (q2, k2, _), = seen
    assert q2.data_ptr() % 16 == 0 and torch.equal(q2, q)
    assert k2 is k  # aligned inputs are passed as they are


def test_strides_fill_the_parameter_block() -> None:
    from attngen.codegen.abi import BWD_PARAMS, FWD_PARAMS, ctypes_struct, set_strides

    q = torch.empty(2, 7, 3, 64)[:, :, :, :]
    k = torch.empty(2, 5, 3, 2, 64)[:, :, 1]  # a strided view
    params = ctypes_struct(FWD_PARAMS)()
    set_strides(params, q=q, k=k, v=k, o=q)
    assert (params.q_batch_stride, params.q_row_stride, params.q_head_stride) == q.stride()[:3]
    assert (params.k_batch_stride, params.k_row_stride, params.k_head_stride) == k.stride()[:3]
    names = {f.name for f in BWD_PARAMS}
    assert all(f"{t}_{s}_stride" in names for t in ("dout", "dq", "dk", "dv") for s in ("batch", "row", "head"))


def test_eager_calls_on_real_tensors_skip_the_dispatch() -> None:
    """op._eager: real tensors outside dynamo may skip the op's dispatch; fake ones (AOTAutograd's trace) may not."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = torch.empty(2, 3)
    assert op._eager(real, real)
    with FakeTensorMode():
        fake = torch.empty(2, 3)
    assert not op._eager(real, fake)


def test_forward_records_its_gradient_without_the_op(monkeypatch: pytest.MonkeyPatch, kernel: AttentionKernel) -> None:
    """Eager with a gradient to record, the forward runs under attngen's own autograd function (no op dispatch);
    without one it calls the launcher's implementation directly; on fake tensors (a trace) it goes through the op,
    whose fake implementation runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls: list[bool] = []

    def impl(q, k, v, softmax_scale, key, extras, scalars, seqs):  # type: ignore[no-untyped-def]
        calls.append(torch.is_grad_enabled())
        return torch.empty_like(q), q.new_empty(q.shape[0], q.shape[2], q.shape[1])

    monkeypatch.setattr(op, "_fwd_impl", impl)
    q = torch.empty(1, 4, 2, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    out, _ = op.attention_fwd(q, q, q, 0.125, kernel.key)
    assert type(out.grad_fn).__name__ == "EagerAttentionBackward" and calls == [False]
    with torch.no_grad():
        out, _ = op.attention_fwd(q, q, q, 0.125, kernel.key)
    assert out.grad_fn is None and calls == [False, False], "directly"
    with FakeTensorMode():
        fake = torch.empty(1, 4, 2, 64, dtype=torch.bfloat16, requires_grad=True)
        out, _ = op.attention_fwd(fake, fake, fake, 0.125, kernel.key)
    assert out.grad_fn is not None and calls == [False, False], "through the op and its autograd layer"


def test_eager_autograd_passes_the_gradients_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """The eager autograd function's backward hands the launcher the output's gradient, the LSE's only when the LSE
    was used (None otherwise: no zero tensor for the preprocess to subtract), and returns its dq, dk, dv and the
    sinks' gradient to the right inputs."""
    seen: list[object] = []

    def forward(q, k, v, out, lse, scale, extras, scalars, seqs):  # type: ignore[no-untyped-def]
        out.copy_(q * scale + k - v)
        lse.copy_(q.sum(-1).transpose(1, 2))

    def backward(dout, q, k, v, out, lse, dlse, scale, extras, scalars, seqs):  # type: ignore[no-untyped-def]
        seen.append(dlse)
        return dout * 2, dout * 3, dout * 4, torch.full_like(extras[0], 5.0)

    op.register_launcher("autograd-probe", forward, backward)
    q, k, v = (torch.randn(1, 8, 2, 16, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    sinks = torch.randn(2, requires_grad=True)
    out, lse = op.attention_fwd(q, k, v, 0.5, "autograd-probe", extras=[sinks])
    torch.testing.assert_close(out, q * 0.5 + k - v)
    dout = torch.randn_like(out)
    dq, dk, dv, ds = torch.autograd.grad(out, (q, k, v, sinks), dout, retain_graph=True)
    assert seen == [None]
    for got, factor in ((dq, 2), (dk, 3), (dv, 4)):
        torch.testing.assert_close(got, dout * factor)
    assert torch.equal(ds, torch.full((2,), 5.0))
    torch.autograd.grad((out * dout).sum() + lse.sum(), (q,))
    assert isinstance(seen[-1], torch.Tensor) and torch.equal(seen[-1], torch.ones_like(lse))
