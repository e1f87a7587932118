"""GPU tests of a packed batch's flat grid (attngen/runtime/tile_table.py): the table (and the entry order) the
cubin builds against the Python one, many entries (the two-step search) with a max_seqlen far past the longest
entry, and a batch too large for a table (the 3-D grid), forward and backward against the float64 reference.

Run on a machine with a CUDA device: `python -m pytest -m gpu tests/test_gpu_tile_table.py`.
"""

from __future__ import annotations

import itertools
import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
from attngen.codegen.abi import tile_table_entry  # noqa: E402
from attngen.runtime import tile_table  # noqa: E402
from attngen.runtime.device import current_arch  # noqa: E402
from attngen.runtime.seqlens import Seqlens  # noqa: E402
from attngen.runtime.tile_table import TileSide  # noqa: E402
from attngen.spec.model import AttentionSpec  # noqa: E402

from .gpu_reference import relative_error  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
_KERNELS: dict[str, attngen.AttentionKernel] = {}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")


def _kernel(spec: AttentionSpec) -> attngen.AttentionKernel:
    if spec.name not in _KERNELS:
        _KERNELS[spec.name] = attngen.compile(spec)
    return _KERNELS[spec.name]


def _cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")


def _needs_sm90() -> None:
    if current_arch().value != "sm90":
        pytest.skip("the flat grid serves the sm90 kernels")


@pytest.mark.parametrize("entries", [1, 7, 45, 1100, tile_table.MAX_ENTRIES])
def test_the_cubins_table_is_the_reference(entries: int) -> None:
    _needs_sm90()
    rng = random.Random(entries)
    lq = [rng.choice([0, 1, rng.randrange(1, 3000)]) for _ in range(entries)]
    lk = [rng.choice([0, rng.randrange(1, 3000)]) for _ in range(entries)]
    varlen = _kernel(SPEC).varlen_kernel()
    arch = current_arch()
    fn = varlen._function(0, arch).sibling(tile_table_entry(varlen.cubins[arch].source.plan.kernel_name))
    cu_q, cu_k = _cu(lq), _cu(lk)
    q = torch.empty(sum(lq), 2, 128, device="cuda")
    seqs = Seqlens.packed(q, cu_q, cu_k, max(lq), max(lk))
    stream = torch.cuda.current_stream().cuda_stream
    for side in (TileSide(False, 128), TileSide(True, 128), TileSide(False, 32, pad_rows=64)):
        table = tile_table.build(fn, stream, seqs, side)
        expected = tile_table.reference(cu_q.tolist(), cu_k.tolist(), side)
        assert [tuple(r) for r in table.rows.tolist()] == expected
        assert table.order.tolist() == [r[1] for r in expected[:-1]]


def _step(kernel: attngen.AttentionKernel, lengths: list[int], max_seqlen: int, seed: int,
          heads: int = 4) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cu = _cu(lengths)
    q, k, v = (torch.randn(sum(lengths), heads, 128, device="cuda", dtype=torch.bfloat16,
                           generator=gen).requires_grad_() for _ in range(3))
    out = kernel(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen)
    dout = torch.randn(out.shape, device="cuda", dtype=out.dtype, generator=gen)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return q, k, v, dout, cu, out, *grads


def _check(spec: AttentionSpec, step: tuple[torch.Tensor, ...]) -> None:
    q, k, v, dout, cu, out, *grads = step
    ref_out, _ = attngen.reference.varlen(spec, q, k, v, cu, cu)
    assert relative_error(out, torch.from_numpy(ref_out).cuda()) < 2e-2
    ref = attngen.reference.varlen_grads(spec, q, k, v, dout, cu, cu)
    for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
        assert relative_error(got, torch.from_numpy(ref[name]).cuda()) < 3e-2, name


def test_many_entries_and_a_max_seqlen_past_the_longest() -> None:
    """45 entries (the table search's two steps), some empty, one of a single row: the output and gradients are the
    reference's, and bitwise those of the same call with max_seqlen the longest (the flat grid does not depend on
    it)."""
    rng = random.Random(5)
    lengths = [rng.choice([0, 1, 129, rng.randrange(2, 400)]) for _ in range(45)]
    kernel = _kernel(SPEC)
    tight = _step(kernel, lengths, max(lengths), seed=11)
    loose = _step(kernel, lengths, 4 * max(lengths) + 100, seed=11)
    _check(SPEC, loose)
    for a, b in zip(tight[5:], loose[5:], strict=True):
        assert torch.equal(a, b)


def test_more_entries_than_a_table_ranks_keep_the_3d_grid() -> None:
    rng = random.Random(9)
    lengths = [rng.randrange(0, 9) for _ in range(tile_table.MAX_ENTRIES + 40)]
    _check(SPEC, _step(_kernel(SPEC), lengths, max(lengths), seed=13, heads=2))
