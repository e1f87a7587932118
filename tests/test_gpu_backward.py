"""GPU tests of the backward pass: gradients of every catalogue spec against float64 autograd.

Run on a machine with a CUDA device: `python -m pytest -m gpu`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
import attngen.runtime.kernel  # noqa: E402
from attngen.catalogue import load_catalogue  # noqa: E402
from attngen.spec.model import AttentionSpec, DType  # noqa: E402

from .gpu_reference import reference, relative_error  # noqa: E402

pytestmark = pytest.mark.gpu

GRAD_TOLERANCE = {DType.fp16: 5e-3, DType.bf16: 2e-2}
#: (batch, seqlen_q, seqlen_k, heads, kv_heads)
SHAPES = [
    (2, 1, 1, 2, 2),
    (1, 17, 17, 8, 1),
    (1, 1000, 1000, 4, 4),
    (1, 257, 1000, 4, 2),
    (1, 1000, 129, 2, 1),
    (1, 4097, 4097, 2, 2),
]
# The window-shaped catalogue specs; the variants (score mods, sinks, other masks): test_gpu_variants.py.
CATALOGUE = [spec for spec in load_catalogue() if spec.is_plain]
_KERNELS: dict[str, attngen.AttentionKernel] = {}


def _kernel(spec: AttentionSpec) -> attngen.AttentionKernel:
    if spec.name not in _KERNELS:
        _KERNELS[spec.name] = attngen.compile(spec)
    return _KERNELS[spec.name]


def _inputs(spec: AttentionSpec, shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    b, sq, sk, h, kvh = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = torch.float16 if spec.dtype is DType.fp16 else torch.bfloat16
    d = spec.head_dim
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(b, sk, kvh, d, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(b, sk, kvh, d, device="cuda", dtype=dtype, generator=gen)
    dout = torch.randn(b, sq, h, d, device="cuda", dtype=dtype, generator=gen)
    return q, k, v, dout


def _reference_grads(spec: AttentionSpec, q, k, v, dout, dlse=None):  # type: ignore[no-untyped-def]
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    out, lse = reference(q64, k64, v64, spec.window_left, spec.window_right)
    loss = (out * dout.double()).sum()
    if dlse is not None:
        loss = loss + (torch.where(torch.isinf(lse), 0.0, lse) * dlse.double()).sum()
    loss.backward()
    return q64.grad, k64.grad, v64.grad


def _grads(kernel, q, k, v, dout, dlse=None):  # type: ignore[no-untyped-def]
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = kernel(q, k, v, return_lse=True)
    loss = (out * dout).sum()
    if dlse is not None:
        loss = loss + (torch.where(torch.isinf(lse), 0.0, lse) * dlse).sum()
    loss.backward()
    return q.grad, k.grad, v.grad


def _check(spec: AttentionSpec, q, k, v, dout, dlse=None) -> None:  # type: ignore[no-untyped-def]
    got = _grads(_kernel(spec), q, k, v, dout, dlse)
    want = _reference_grads(spec, q, k, v, dout, dlse)
    for name, g, r in zip(("dq", "dk", "dv"), got, want, strict=True):
        assert g.shape == r.shape, f"{name} shape {tuple(g.shape)} != {tuple(r.shape)}"
        err = relative_error(g, r)
        print(f"bwd {spec.name} q{tuple(q.shape)} k{tuple(k.shape)}: {name} rel err {err:.2e}")
        assert err < GRAD_TOLERANCE[spec.dtype], f"{spec.name} {tuple(q.shape)} {tuple(k.shape)}: {name} {err:.2e}"


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_catalogue_gradients(spec: AttentionSpec) -> None:
    for i, shape in enumerate(SHAPES):
        q, k, v, dout = _inputs(spec, shape, seed=100 + i)
        _check(spec, q, k, v, dout)


@pytest.mark.parametrize("window", [(0, 0), (5, 3), (64, -1), (-1, 7)])
@pytest.mark.parametrize("head_dim", [64, 96, 192])
def test_window_gradients(window: tuple[int, int], head_dim: int) -> None:
    spec = AttentionSpec(name=f"bw{window[0]}_{window[1]}_hd{head_dim}", head_dim=head_dim, dtype="fp16",
                         mask="sliding_window", window=window)
    for i, shape in enumerate([(1, 333, 333, 4, 2), (1, 129, 700, 2, 1), (1, 700, 129, 2, 2)]):
        q, k, v, dout = _inputs(spec, shape, seed=7 + i)
        _check(spec, q, k, v, dout)


def test_lse_gradient_and_strided_inputs() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    gen = torch.Generator(device="cuda").manual_seed(9)
    qkv = torch.randn(2, 300, 3, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v = qkv.unbind(dim=2)
    dout = torch.randn(2, 300, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    dlse = torch.randn(2, 4, 300, device="cuda", dtype=torch.float32, generator=gen)
    _check(spec, q, k, v, dout, dlse)


def test_sum_backward_with_expanded_grad() -> None:
    """out.sum().backward() hands the op a stride-0 gradient."""
    spec = AttentionSpec(head_dim=64, dtype="bf16")
    q, k, v, _ = _inputs(spec, (1, 100, 100, 2, 2), seed=3)
    _check(spec, q, k, v, torch.ones_like(q))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_deterministic_gradients_are_exact(head_dim: int) -> None:
    """deterministic: true runs the wgmma kernel with its dQ reductions ordered (sm90; at hd256 each warpgroup of the
    head_dim split waits for its turn) or the atomic-free mma.sync kernels: same accuracy as the default."""
    spec = AttentionSpec(name=f"det{head_dim}", head_dim=head_dim, dtype="bf16", mask="causal", deterministic=True)
    arch = attngen.runtime.kernel.current_arch()
    plan = _kernel(spec).backward.cubin(arch).source.plan
    if arch.value == "sm90":
        assert plan.family == "sm90_bwd" and plan.dkdv_wgmma.ordered_dq
    else:
        assert plan.family == "sm80_bwd" and not plan.dq_atomic
    for i, shape in enumerate([(1, 17, 17, 8, 1), (1, 1000, 129, 2, 1), (1, 257, 1000, 4, 2)]):
        q, k, v, dout = _inputs(spec, shape, seed=300 + i)
        _check(spec, q, k, v, dout)


@pytest.mark.parametrize("head_dim", [128, 192, 256])
def test_backward_runs_the_family_the_planner_chose(head_dim: int) -> None:
    """The launcher dispatches through the plan's family; the cubin holds that family's kernels only (on sm90 at
    hd192 the wgmma kernel whose warpgroups halve the KV rows, at hd256 the one whose warpgroups split head_dim)."""
    spec = AttentionSpec(name=f"fam{head_dim}", head_dim=head_dim, dtype="bf16", mask="causal")
    arch = attngen.runtime.kernel.current_arch()
    cubin = _kernel(spec).backward.cubin(arch)
    assert cubin.source.plan.family == ("sm90_bwd" if arch.value == "sm90" else "sm80_bwd")
    hopper = getattr(cubin.source.plan, "dkdv_wgmma", None)
    assert bool(hopper and hopper.split) == (arch.value == "sm90" and head_dim == 256)
    assert bool(hopper and hopper.kv_halves) == (arch.value == "sm90" and head_dim == 192)
    assert sorted(r.name for r in cubin.resources) == sorted(cubin.source.entry_names)
    q, k, v, dout = _inputs(spec, (1, 1000, 1000, 4, 2), seed=41)
    _check(spec, q, k, v, dout)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_80_query_steps_give_the_same_gradients(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """sm90_bwd's 80-query steps of unmasked hd128 (off by default: measured no faster) stay exact: dQ's transposed
    product, its boxes in the tile-ordered accumulator and dq_convert's mapping of them, 80-row TMA boxes and padded
    row values, lengths off every multiple of 80, GQA."""
    from attngen.families import sm90_bwd_rows

    if attngen.runtime.kernel.current_arch().value != "sm90":
        pytest.skip("the wgmma backward runs on sm90")
    monkeypatch.setattr(sm90_bwd_rows, "BLOCK_M_UNMASKED", {128: 80})
    spec = AttentionSpec(name=f"q80_{dtype}", head_dim=128, dtype=dtype, mask="none")
    assert _kernel(spec).backward.cubin(attngen.runtime.kernel.current_arch()).source.plan.dkdv_wgmma.block_m == 80
    for i, shape in enumerate([(2, 1, 1, 2, 2), (1, 79, 81, 8, 1), (1, 1000, 1000, 4, 2), (1, 257, 1000, 4, 2),
                               (2, 1000, 129, 2, 1), (1, 4097, 4097, 2, 2)]):
        _check(spec, *_inputs(spec, shape, seed=700 + i))


def _check_edge_shapes(spec: AttentionSpec, kernel: attngen.AttentionKernel, seed: int, label: str) -> None:
    """Gradients against the float64 reference at lengths off the step and group, with GQA, a one-query side,
    a key side shorter than a step and (third shape) an LSE gradient."""
    for i, shape in enumerate([(1, 17, 17, 8, 1), (2, 1000, 129, 2, 1), (1, 257, 1000, 4, 2), (1, 1, 300, 4, 4),
                               (1, 1100, 1100, 2, 2)]):
        q, k, v, dout = _inputs(spec, shape, seed=seed + i)
        dlse = torch.randn(q.shape[0], q.shape[2], q.shape[1], device="cuda") if i == 2 else None
        got, want = _grads(kernel, q, k, v, dout, dlse), _reference_grads(spec, q, k, v, dout, dlse)
        for name, g, r in zip(("dq", "dk", "dv"), got, want, strict=True):
            assert g.isfinite().all(), f"{spec.name} {tuple(q.shape)}: {name} not finite"
            err = relative_error(g, r)
            print(f"bwd {label} {spec.name} q{tuple(q.shape)}: {name} rel err {err:.2e}")
            assert err < GRAD_TOLERANCE[spec.dtype], f"{spec.name} {tuple(q.shape)}: {name} {err:.2e}"


@pytest.mark.parametrize(("mask", "head_dim", "dtype", "window"),
                         [("causal", 64, "bf16", None), ("causal", 128, "bf16", None), ("none", 256, "bf16", None),
                          ("sliding_window", 96, "bf16", (200, 100)), ("none", 128, "fp16", None),
                          ("causal", 192, "fp16", None)])
def test_atomic_dq_of_sm80_bwd_gives_the_same_gradients(mask: str, head_dim: int, dtype: str,
                                                        window: tuple[int, int] | None) -> None:
    """sm80_bwd's atomic dQ (the group-ordered accumulator, D and the LSE in padded rows, dq_convert) is exact at
    lengths that are not whole steps or groups, with GQA, a query or key side shorter than a step and an LSE
    gradient."""
    from attngen.codegen.renderer import render
    from attngen.families.sm80_bwd import Sm80Backward
    from attngen.planning.archs import arch_info
    from attngen.toolchain.cache import compile_cached

    extra = {"window": window} if window else {}
    spec = AttentionSpec(name=f"atomic_{mask}{head_dim}_{dtype}", head_dim=head_dim, dtype=dtype, mask=mask, **extra)
    arch = attngen.runtime.kernel.current_arch()
    plan = Sm80Backward().plan(spec, arch_info(arch), atomic_dq=True)
    assert plan.dq_atomic and plan.entry_names[-1].endswith("_dq_convert")
    kernel = attngen.compile(spec)
    kernel.backward.replace(arch, compile_cached(render(plan)))
    _check_edge_shapes(spec, kernel, seed=500, label="atomic")
    assert kernel.backward.cubin(arch).source.plan.dq_atomic and len(kernel.backward.ready) == 5  # what ran


@pytest.mark.parametrize(("mask", "head_dim", "dtype", "window", "tile"),
                         [("causal", 64, "bf16", None, (128, 128, 64)), ("none", 128, "bf16", None, (128, 64, 128)),
                          ("causal", 128, "fp16", None, (64, 128, 128)), ("sliding_window", 64, "bf16", (200, 100),
                                                                           (64, 64, 64)),
                          ("none", 256, "bf16", None, (64, 64, 256)), ("causal", 256, "fp16", None, (128, 32, 128))])
def test_grid_partition_of_sm80_bwd_gives_the_same_gradients(mask: str, head_dim: int, dtype: str,
                                                              window: tuple[int, int] | None,
                                                              tile: tuple[int, int, int]) -> None:
    """sm80_bwd's grid partition (S^T and dP^T in a 2-D warp grid, P^T and dS^T through shared memory, 32-row dK/dV
    tiles over a share of the columns, dQ in 32-row parts) is exact at the atomic test's shapes: lengths off the
    step and group, GQA, a short side, an LSE gradient; head-dim slices (d_chunk below head_dim) included."""
    from attngen.codegen.renderer import render
    from attngen.families.sm80_bwd import Sm80Backward, grid_candidates
    from attngen.planning.archs import arch_info
    from attngen.toolchain.cache import compile_cached

    extra = {"window": window} if window else {}
    spec = AttentionSpec(name=f"grid_{mask}{head_dim}_{dtype}", head_dim=head_dim, dtype=dtype, mask=mask, **extra)
    arch = attngen.runtime.kernel.current_arch()
    info = arch_info(arch)
    block_n, block_m, d_chunk = tile
    dkdv = next(t for t in grid_candidates(spec, info, [], check_registers=False)
                if (t.block_n, t.block_m, t.d_chunk, t.num_warps) == (block_n, block_m, d_chunk, 8))
    plan = Sm80Backward().plan(spec, info, atomic_dq=True).model_copy(update={"dkdv": dkdv, "dq_atomic": True})
    cubin = compile_cached(render(plan))
    assert not [r for r in cubin.resources if r.spill_stores or r.spill_loads], cubin.resources
    kernel = attngen.compile(spec)
    kernel.backward.replace(arch, cubin)
    _check_edge_shapes(spec, kernel, seed=700, label=f"grid {tile}")
    assert kernel.backward.cubin(arch).source.plan.dkdv.warp_rows == 32   # what ran


@pytest.mark.parametrize(("mask", "head_dim", "window"), [("causal", 128, None), ("none", 64, None),
                                                          ("sliding_window", 128, (300, 0)),
                                                          ("sliding_window", 64, (200, 100)),
                                                          ("none", 256, None), ("causal", 192, None),
                                                          ("sliding_window", 256, (300, 0))])
def test_deterministic_gradients_are_bitwise_equal(mask: str, head_dim: int, window: tuple[int, int] | None) -> None:
    """Three runs give the same bits (on sm90 the ordered dQ reductions: ascending KV blocks without a right
    bound, descending with one; at hd192/256 the split's two warpgroups each take their turn), and the gradients
    are exact."""
    extra = {"window": window} if window else {}
    spec = AttentionSpec(name=f"det_{mask}_{head_dim}", head_dim=head_dim, dtype="bf16", mask=mask,
                         deterministic=True, **extra)
    kernel = _kernel(spec)
    q, k, v, dout = _inputs(spec, (2, 2048, 2048, 8, 2), seed=5)
    first = _grads(kernel, q, k, v, dout)
    for _ in range(2):
        again = _grads(kernel, q, k, v, dout)
        for a, b in zip(first, again, strict=True):
            assert torch.equal(a, b)
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


#: Shapes for two builds' gradients side by side: GQA, lengths off the step, and a one-query side (with a window, KV
#: blocks with no query tile).
_AB_SHAPES = [(1, 1000, 1000, 4, 2), (2, 300, 1100, 2, 1), (1, 1, 1000, 4, 2)]


def _builds_agree(monkeypatch: pytest.MonkeyPatch, module: Any, constants: Callable[[bool], dict[str, object]],
                  make_spec: Callable[[bool], AttentionSpec], plan_ok: Callable[[Any, bool], bool], seed: int,
                  dq: str, shapes: list[tuple[int, ...]] = _AB_SHAPES, dkdv: str = "bitwise") -> AttentionSpec:
    """Builds of make_spec(flag) with constants(flag) set on the family `module`, flag False then True (each plan's
    dK/dV tiling checked by plan_ok(tiling, flag)), give finite gradients on `shapes`, dK and dV bitwise equal (or
    within 1e-2: dkdv "close"), and dQ bitwise equal ("bitwise"), within 1e-2 ("close") or anything finite ("any").
    Returns the True build's spec."""
    arch = attngen.runtime.kernel.current_arch()
    if arch.value != "sm90":
        pytest.skip("the wgmma backward runs on sm90")
    runs: dict[bool, list[tuple[torch.Tensor, ...]]] = {}
    for flag in (False, True):
        with monkeypatch.context() as m:
            for name, value in constants(flag).items():
                m.setattr(module, name, value)
            spec = make_spec(flag)
            kernel = _kernel(spec)
            assert plan_ok(kernel.backward.cubin(arch).source.plan.dkdv_wgmma, flag)
            runs[flag] = [_grads(kernel, *_inputs(spec, shape, seed=seed + i)) for i, shape in enumerate(shapes)]
    for shape, got, want in zip(shapes, runs[True], runs[False], strict=True):
        for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
            assert g.isfinite().all(), f"{shape}: {name} not finite"
            mode = dq if name == "dq" else dkdv
            if mode == "bitwise":
                assert torch.equal(g, w), f"{shape}: {name} differs between the builds"
            elif mode == "close":
                assert relative_error(g, w) < 1e-2, f"{shape}: {name} {relative_error(g, w):.2e} between the builds"
    return spec


@pytest.mark.parametrize(("mask", "window", "deterministic"),
                         [("none", None, False), ("causal", None, False), ("sliding_window", (200, 0), False),
                          ("causal", None, True), ("sliding_window", (200, 0), True)])
def test_carried_products_give_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                  window: tuple[int, int] | None, deterministic: bool) -> None:
    """hd192's steps with their dV^T and dK^T products carried into the next step (sm90_bwd_halves.CARRY_PRODUCTS_*,
    with dV^T early where the plan issues it so: the first step's products overwrite the accumulators, a block with no
    query tile writes zeros) give dK and dV bitwise equal to the steps that wait for them (the same products in the same
    order), dQ too where it is ordered, and exact gradients."""
    from attngen.families import sm90_bwd_halves

    extra = {"window": window} if window else {}
    spec = _builds_agree(
        monkeypatch, sm90_bwd_halves,
        lambda carry: dict.fromkeys(("CARRY_PRODUCTS_MASKED", "CARRY_PRODUCTS_UNMASKED", "CARRY_PRODUCTS_DV_EARLY"),
                                    carry),
        lambda carry: AttentionSpec(name=f"carry{int(carry)}_{mask}_{int(deterministic)}", head_dim=192, dtype="bf16",
                                    mask=mask, deterministic=deterministic, **extra),
        lambda t, carry: t.carry_products == carry, 900, "bitwise" if deterministic else "any")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "window", "carry"),
                         [("none", None, False), ("causal", None, False), ("sliding_window", (200, 0), False),
                          ("causal", None, True), ("none", None, True)])
def test_dv_issued_early_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                  window: tuple[int, int] | None, carry: bool) -> None:
    """hd192's steps with dV^T's product issued before dP's wait (sm90_bwd_halves.DV_EARLY) give dK and dV bitwise equal
    to the steps that issue it after dQ's (the same products over the same tiles), and exact gradients; with and
    without a step's products carried into the next (both orders alike)."""
    from attngen.families import sm90_bwd_halves

    extra = {"window": window} if window else {}
    carries = ("CARRY_PRODUCTS_MASKED", "CARRY_PRODUCTS_UNMASKED", "CARRY_PRODUCTS_DV_EARLY")
    spec = _builds_agree(
        monkeypatch, sm90_bwd_halves, lambda early: {"DV_EARLY": early, **dict.fromkeys(carries, carry)},
        lambda early: AttentionSpec(name=f"dv_early{int(early)}_{mask}_{int(carry)}", head_dim=192, dtype="bf16",
                                    mask=mask, **extra),
        lambda t, early: (t.dv_early, t.carry_products) == (early, carry), 700, "any")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "window"), [("none", None), ("causal", None), ("sliding_window", (200, 0))])
def test_one_do_stage_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                               window: tuple[int, int] | None) -> None:
    """hd192 with one dO stage on mbarriers of its own and both warpgroups' dQ staged for bulk reductions
    (sm90_bwd_halves.DO_ONE_STAGE) gives dK and dV bitwise equal to two shared stages with warpgroup 0 adding from
    registers (the same products over the same tiles), dQ within rounding of it (the additions' order differs), and
    exact gradients; a batch of 3 beside the usual shapes."""
    from attngen.families import sm90_bwd_halves

    extra = {"window": window} if window else {}
    spec = _builds_agree(
        monkeypatch, sm90_bwd_halves, lambda one: {"DO_ONE_STAGE": one},
        lambda one: AttentionSpec(name=f"one_do{int(one)}_{mask}", head_dim=192, dtype="bf16", mask=mask, **extra),
        lambda t, one: (t.do_stages, t.dq_bulk_wgs) == ((1, 2) if one else (0, 1)), 600, "close",
        [*_AB_SHAPES, (3, 130, 700, 2, 2)])
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "window"), [("none", None), ("causal", None), ("sliding_window", (200, 0))])
def test_split_dv_issued_early_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                        window: tuple[int, int] | None) -> None:
    """hd256's split with each warpgroup's dV product issued once P^T is stored (sm90_bwd_split.DV_EARLY_*) gives dK and
    dV bitwise equal to the split that issues it with dK (the same products over the same tiles), and exact
    gradients."""
    from attngen.families import sm90_bwd_split

    extra = {"window": window} if window else {}
    spec = _builds_agree(
        monkeypatch, sm90_bwd_split, lambda early: {"DV_EARLY_MASKED": early, "DV_EARLY_UNMASKED": early},
        lambda early: AttentionSpec(name=f"split_dv_early{int(early)}_{mask}", head_dim=256, dtype="bf16", mask=mask,
                                    **extra),
        lambda t, early: t.dv_early == early, 800, "any")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "head_dim"), [("none", 128), ("causal", 128), ("sliding_window", 128)])
def test_kept_ds_store_addresses_give_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                         head_dim: int) -> None:
    """The dS^T stores' addresses kept across the steps (sm90_bwd_rows.DS_OFFSETS_KEPT) give dK and dV bitwise equal to
    the recomputed ones' (the same stores), dQ within rounding (the order of its fp32 additions varies), and exact
    gradients."""
    from attngen.families import sm90_bwd_rows

    spec = _builds_agree(
        monkeypatch, sm90_bwd_rows, lambda kept: {"DS_OFFSETS_KEPT": kept},
        lambda kept: AttentionSpec(name=f"ds_at{int(kept)}_{mask}{head_dim}", head_dim=head_dim, dtype="bf16",
                                   mask=mask, **({"window": (200, 0)} if mask == "sliding_window" else {})),
        lambda t, kept: not t.split and not t.kv_halves and t.block_m == 64, 1200, "close")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "head_dim"), [("none", 64), ("causal", 64), ("none", 128), ("sliding_window", 128)])
def test_ds_store_addresses_by_xor_give_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                           head_dim: int) -> None:
    """The kept dS^T store addresses in one register, each k-step's an XOR of it (sm90_bwd_rows.DS_OFFSETS_XOR), give dK
    and dV bitwise equal to the other form's (hd128: a register a k-step; hd64: recomputed every step), dQ within
    rounding, and exact gradients: an address off by a chunk would show in dK."""
    from attngen.families import sm90_bwd_rows

    spec = _builds_agree(
        monkeypatch, sm90_bwd_rows, lambda xor: {"DS_OFFSETS_XOR": xor},
        lambda xor: AttentionSpec(name=f"ds_xor{int(xor)}_{mask}{head_dim}", head_dim=head_dim, dtype="bf16",
                                  mask=mask, **({"window": (200, 0)} if mask == "sliding_window" else {})),
        lambda t, xor: not t.split and not t.kv_halves and sm90_bwd_rows.ds_offsets_xor(t) == xor, 1300, "close")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=7))


_BLOCK_ENDS = {"V_LATE": "v_late", "DV_OUT_FIRST": "dv_out_first"}


@pytest.mark.parametrize("switch", sorted(_BLOCK_ENDS))
@pytest.mark.parametrize(("mask", "head_dim"), [("none", 64), ("causal", 64), ("causal", 128), ("sliding_window", 128)])
def test_block_start_and_end_orders_give_the_same_gradients(monkeypatch: pytest.MonkeyPatch, switch: str, mask: str,
                                                            head_dim: int) -> None:
    """V loaded after the first Q/dO stage on an mbarrier of its own (sm90_bwd_rows.V_LATE), and dV written out before
    the warpgroups meet at the block's end (DV_OUT_FIRST), give dK and dV bitwise equal to the default order, dQ within
    rounding, and exact gradients; a window leaves KV blocks without a step (V never loaded, dK and dV zero through the
    tiles' shared memory). A dP^T issued before V landed, or a dV tile overwritten while read, would not agree."""
    from attngen.families import sm90_bwd_rows

    field = _BLOCK_ENDS[switch]
    spec = _builds_agree(
        monkeypatch, sm90_bwd_rows, lambda on: {switch: on},
        lambda on: AttentionSpec(name=f"{field}{int(on)}_{mask}{head_dim}", head_dim=head_dim, dtype="bf16",
                                 mask=mask, **({"window": (200, 0)} if mask == "sliding_window" else {})),
        lambda t, on: not t.split and not t.kv_halves and getattr(t, field) == on, 1600, "close")
    with monkeypatch.context() as m:
        m.setattr(sm90_bwd_rows, switch, True)
        _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=9))


@pytest.mark.parametrize(("mask", "head_dim", "extra"),
                         [("none", 64, {}), ("causal", 64, {}), ("none", 128, {}), ("causal", 128, {}),
                          ("sliding_window", 128, {"window": (200, 0)}), ("causal", 128, {"deterministic": True}),
                          ("causal", 64, {"deterministic": True})])
def test_accumulators_from_the_row_values_give_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                                  head_dim: int, extra: dict[str, Any]) -> None:
    """S^T's and dP^T's accumulators starting at -LSE / scale_log2 and -D (sm90_bwd_rows.DP_FROM_D, S_FROM_LSE; the
    preprocess writes the row values so), with hd64's exps split around dP^T's wait, give gradients within rounding of
    the kernels that subtract them after the products, and exact against float64: a row value in the wrong column or
    left unscaled would not."""
    from attngen.families import sm90_bwd_rows

    spec = _builds_agree(
        monkeypatch, sm90_bwd_rows, lambda on: {"DP_FROM_D": on, "S_FROM_LSE": on},
        lambda on: AttentionSpec(name=f"rows_acc{int(on)}_{mask}{head_dim}{int(bool(extra))}", head_dim=head_dim,
                                 dtype="bf16", mask=mask, **extra),
        lambda t, on: t.s_from_lse == on and t.dp_from_d == on, 1400, "close", dkdv="close")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=8))


@pytest.mark.parametrize("score_mod", [{"alibi": "standard"}, {"expr": "score * 0.5"}])
def test_dp_from_d_under_a_constant_score_mod_derivative(monkeypatch: pytest.MonkeyPatch,
                                                          score_mod: dict[str, Any]) -> None:
    """Under a score mod whose derivative is one constant (1 for ALiBi, 0.5 here) dP^T's accumulator starts at -D while
    S^T's does not (the score mod needs the raw score): gradients within rounding of the build without it."""
    from attngen.families import sm90_bwd_rows

    _builds_agree(
        monkeypatch, sm90_bwd_rows, lambda on: {"DP_FROM_D": on},
        lambda on: AttentionSpec(name=f"dp_d{int(on)}_{len(score_mod)}{next(iter(score_mod))}", head_dim=128,
                                 dtype="bf16", mask="causal", score_mod=score_mod),
        lambda t, on: not t.s_from_lse and t.dp_from_d == on, 1500, "close", dkdv="close")


@pytest.mark.parametrize(("mask", "head_dim"), [("none", 64), ("causal", 128), ("none", 128)])
def test_ordered_dq_by_bulk_reductions_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                                head_dim: int) -> None:
    """A deterministic dQ bulk-reduced into the tile-ordered accumulator in each tile's turn
    (sm90_bwd_rows.ORDERED_DQ_BULK) gives dK and dV bitwise equal to the row-major accumulator's tensor-map reductions
    in the same turns, dQ within rounding of it (dq_convert scales where the host did), and exact gradients; two runs
    give the same bits."""
    from attngen.families import sm90_bwd_rows

    spec = _builds_agree(
        monkeypatch, sm90_bwd_rows, lambda bulk: {"ORDERED_DQ_BULK": bulk},
        lambda bulk: AttentionSpec(name=f"ordered_bulk{int(bulk)}_{mask}{head_dim}", head_dim=head_dim, dtype="bf16",
                                   mask=mask, deterministic=True),
        lambda t, bulk: t.ordered_dq and t.dq_bulk == bulk and not t.dq_overlap, 1100, "close",
        [*_AB_SHAPES, (3, 130, 700, 2, 2)])
    kernel = _kernel(spec)
    q, k, v, dout = _inputs(spec, (2, 1500, 1500, 4, 2), seed=8)
    first, again = _grads(kernel, q, k, v, dout), _grads(kernel, q, k, v, dout)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_deterministic_split_dv_issued_early_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch,
                                                                      mask: str) -> None:
    """hd256's deterministic split with its dV products issued once P^T is stored (DV_EARLY_DETERMINISTIC) gives dK,
    dV and dQ bitwise equal to the split that issues them with dK (the same products, dQ added in the same order), and
    exact gradients."""
    from attngen.families import sm90_bwd_split

    spec = _builds_agree(
        monkeypatch, sm90_bwd_split, lambda early: {"DV_EARLY_DETERMINISTIC": early},
        lambda early: AttentionSpec(name=f"split_det_early{int(early)}_{mask}", head_dim=256, dtype="bf16", mask=mask,
                                    deterministic=True),
        lambda t, early: t.dv_early == early and t.ordered_dq and not t.dq_bulk, 1000, "bitwise")
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "window"), [("none", None), ("causal", None), ("sliding_window", (200, 0))])
def test_split_staged_dq_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                  window: tuple[int, int] | None) -> None:
    """hd256's split with one dO stage and warpgroup 1's dQ boxes staged for a bulk reduction
    (sm90_bwd_split.SPLIT_STAGED_DQ) gives dK and dV bitwise equal to two shared stages with every dQ box added from
    registers, dQ within rounding of it, and exact gradients; a batch of 3 beside the usual shapes."""
    from attngen.families import sm90_bwd_split

    extra = {"window": window} if window else {}
    spec = _builds_agree(
        monkeypatch, sm90_bwd_split, lambda staged: {"SPLIT_STAGED_DQ": staged},
        lambda staged: AttentionSpec(name=f"split_staged{int(staged)}_{mask}", head_dim=256, dtype="bf16", mask=mask,
                                     **extra),
        lambda t, staged: (t.dq_bulk, t.do_stages) == ((True, 1) if staged else (False, 0)), 500, "close",
        [*_AB_SHAPES, (3, 130, 700, 2, 2)])
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_split_waiting_late_for_the_staging_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch,
                                                                     mask: str) -> None:
    """hd256's split waiting for its staging's last reduction before the step's first consumer barrier
    (sm90_bwd_split.STAGING_WAIT_LATE) gives dK and dV bitwise equal to the wait at the step's start, dQ within
    rounding of it (the order of the fp32 additions differs), and exact gradients."""
    from attngen.families import sm90_bwd_split

    spec = _builds_agree(
        monkeypatch, sm90_bwd_split, lambda late: {"STAGING_WAIT_LATE": late},
        lambda late: AttentionSpec(name=f"split_wait{int(late)}_{mask}", head_dim=256, dtype="bf16", mask=mask),
        lambda t, late: t.dq_bulk, 950, "close", [*_AB_SHAPES, (3, 130, 700, 2, 2)])
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize(("mask", "window"), [("none", None), ("causal", None), ("sliding_window", (200, 0))])
def test_split_staging_warpgroup_0_too_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, mask: str,
                                                                window: tuple[int, int] | None) -> None:
    """hd256's split with warpgroup 0's first dQ box staged beside all of warpgroup 1's (sm90_bwd_split.STAGE_OTHER_WG:
    two bulk reductions a step, the warpgroups' own) gives dK and dV bitwise equal to warpgroup 1's alone, dQ within
    rounding of it, and exact gradients; a batch of 3 beside the usual shapes."""
    from attngen.families import sm90_bwd_split

    extra = {"window": window} if window else {}
    spec = _builds_agree(
        monkeypatch, sm90_bwd_split, lambda other: {"STAGE_OTHER_WG": other},
        lambda other: AttentionSpec(name=f"split_other{int(other)}_{mask}", head_dim=256, dtype="bf16", mask=mask,
                                    **extra),
        lambda t, other: [r.dq_staged for r in t.split] == ([1, 2] if other else [0, 2]), 900, "close",
        [*_AB_SHAPES, (3, 130, 700, 2, 2)])
    _check(spec, *_inputs(spec, (1, 1100, 1100, 4, 2), seed=6))


@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
def test_the_causal_tail_order_gives_the_same_gradients(monkeypatch: pytest.MonkeyPatch, head_dim: int) -> None:
    """A causal mask's last chains dealt heaviest block first (sm90_tail_order.BWD_TAIL_WAVES) give dK and dV bitwise
    equal to the grid's own order (a block's work does not depend on when it runs), dQ equal up to the order of its
    fp32 additions, and exact gradients. The first shape's tail is part of its chains (the remap's both sides), the
    second's all of them."""
    from attngen.families import sm90_tail_order
    from attngen.runtime.device import sm_count

    arch = attngen.runtime.kernel.current_arch()
    if arch.value != "sm90":
        pytest.skip("the wgmma backward runs on sm90")
    shapes = [(2, 4096, 4096, 8, 8), (1, 1000, 1000, 4, 2)]
    runs: dict[bool, list[tuple[torch.Tensor, ...]]] = {}
    for tail in (False, True):
        with monkeypatch.context() as m:
            m.setattr(sm90_tail_order, "BWD_TAIL_WAVES", 2.0 if tail else 0.0)
            spec = AttentionSpec(name=f"tail{int(tail)}_hd{head_dim}", head_dim=head_dim, dtype="bf16", mask="causal")
            kernel = _kernel(spec)
            plan = kernel.backward.cubin(arch).source.plan
            assert plan.tail_waves == (2.0 if tail else 0.0)
            runs[tail] = [_grads(kernel, *_inputs(spec, shape, seed=970 + i)) for i, shape in enumerate(shapes)]
    block_n = plan.dkdv_wgmma.block_n
    b, s, _, _, kvh = shapes[0]
    assert 2 <= sm90_tail_order.tail_chains(-(-s // block_n), b * kvh, sm_count(0), 2.0) < b * kvh
    for shape, got, want in zip(shapes, runs[True], runs[False], strict=True):
        for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
            assert g.isfinite().all(), f"{shape}: {name} not finite"
            if name == "dq":
                assert relative_error(g, w) < 1e-2, f"{shape}: dq {relative_error(g, w):.2e} from the grid order's"
            else:
                assert torch.equal(g, w), f"{shape}: {name} differs from the grid order's"
    _check(spec, *_inputs(spec, (2, 1100, 1100, 4, 2), seed=8))


def test_torch_compile_backward_matches_eager() -> None:
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="causal")
    kernel = _kernel(spec)

    def step(q, k, v):  # type: ignore[no-untyped-def]
        return (kernel(q * 1.0, k, v) ** 2).sum()

    q, k, v, _ = _inputs(spec, (2, 300, 300, 4, 2), seed=11)
    grads = []
    for fn in (step, torch.compile(step, fullgraph=True)):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        fn(*leaves).backward()
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads, strict=True):
        assert torch.isfinite(b.float()).all() and torch.equal(a, b)


def test_backward_memory_grows_linearly() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    kernel = _kernel(spec)
    peaks = {}
    for seqlen in (4096, 16384):
        q, k, v, dout = _inputs(spec, (1, seqlen, 8, 8, 8), seed=1)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        kernel(q, k, v).backward(dout)
        torch.cuda.synchronize()
        peaks[seqlen] = torch.cuda.max_memory_allocated() - base
        del q, k, v, dout
    ratio = peaks[16384] / peaks[4096]
    print(f"peak extra memory fwd+bwd: 4k {peaks[4096] / 2**20:.1f} MiB, 16k {peaks[16384] / 2**20:.1f} MiB, "
          f"ratio {ratio:.2f}")
    assert 3.0 < ratio < 5.0, f"peak memory grew {ratio:.1f}x for 4x the sequence (O(N) expected)"


def test_training_steps_match_sdpa() -> None:
    """A small causal transformer layer trained a few steps with attngen and with SDPA: same losses."""
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="causal")
    kernel = _kernel(spec)

    class Layer(torch.nn.Module):
        def __init__(self, use_attngen: bool) -> None:
            super().__init__()
            self.use_attngen = use_attngen
            self.qkv = torch.nn.Linear(256, 3 * 256)
            self.proj = torch.nn.Linear(256, 256)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
            self.norm1, self.norm2 = torch.nn.LayerNorm(256), torch.nn.LayerNorm(256)

        def forward(self, x):  # type: ignore[no-untyped-def]
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, 4, 64).to(torch.bfloat16).unbind(dim=2)
            if self.use_attngen:
                att = kernel(q, k, v)
            else:
                att = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
            x = x + self.proj(att.reshape(b, s, 256).float())
            return x + self.mlp(self.norm2(x))

    torch.manual_seed(0)
    ours, theirs = Layer(True).cuda(), Layer(False).cuda()
    theirs.load_state_dict(ours.state_dict())
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(4, 256, 256, device="cuda", generator=gen)
    target = torch.randn(4, 256, 256, device="cuda", generator=gen)
    losses = []
    for model in (ours, theirs):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        trace = []
        for _ in range(8):
            loss = torch.nn.functional.mse_loss(model(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            trace.append(loss.item())
        losses.append(trace)
    print("losses attngen", [f"{v:.4f}" for v in losses[0]], "sdpa", [f"{v:.4f}" for v in losses[1]])
    assert losses[0][-1] < losses[0][0]
    for a, b in zip(*losses, strict=True):
        assert abs(a - b) / b < 1e-2, losses
