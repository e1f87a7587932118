"""Prepared forward and backward launches on the CPU (no GPU needed): the geometry that keys them, the cache that
keeps them, and the blocks they launch. A launch prepared from one call and run with another of its geometry must
launch exactly what a launch prepared from that other call launches: every field a call changes is written per
run, none is left from the call it was prepared from."""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from attngen.families import sm90_bwd_ready  # noqa: E402
from attngen.features.variant import variant_of  # noqa: E402
from attngen.planning.planner import forward_family, plan  # noqa: E402
from attngen.planning.planner_bwd import backward_family, plan_bwd  # noqa: E402
from attngen.runtime import backward as rt  # noqa: E402
from attngen.runtime import tile_table, tma  # noqa: E402
from attngen.runtime.driver import LoadedFunction, PreparedLaunch  # noqa: E402
from attngen.runtime.forward import FwdCall  # noqa: E402
from attngen.runtime.prepared import ReadyCache  # noqa: E402
from attngen.runtime.seqlens import Seqlens  # noqa: E402
from attngen.runtime.variant_args import KernelVariant, prepare  # noqa: E402
from attngen.spec.model import Arch, AttentionSpec  # noqa: E402

SINKS = AttentionSpec(name="p", head_dim=64, dtype="bf16", mask="causal", sinks="learnable")
VARLEN = AttentionSpec(name="pv", head_dim=128, dtype="bf16", mask="causal", seqlens="varlen")
Launched = list[tuple[str, tuple[int, int, int], int, bytes]]


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> Launched:
    """Launches recorded (entry, grid, threads, the parameter block's bytes); tensor maps stand in as a digest of
    their key, so a map of another address or shape gives other bytes."""
    seen: Launched = []

    def record(self: PreparedLaunch, stream: int, params: ctypes.Structure) -> None:
        seen.append((self.fn.name, self.grid, self.threads, bytes(params)))

    def fake_map(key: tma.MapKey) -> bytes:
        return hashlib.sha512(repr(key).encode()).digest() * 2

    monkeypatch.setattr(PreparedLaunch, "__call__", record)
    monkeypatch.setattr(tma, "tensor_map", fake_map)
    return seen


def _function(entry: str, smem: int = 0) -> LoadedFunction:
    return LoadedFunction(name=entry, module=None, function=4096, smem_bytes=smem)


def _dense(batch: int, seqlen: int, heads: int, d: int, scale: float, spec: AttentionSpec) -> rt.BwdCall:
    def t() -> Any:
        return torch.randn(batch, seqlen, heads, d).to(torch.bfloat16)

    q, k, v, out, dout = t(), t(), t(), t(), t()
    lse = torch.randn(batch, heads, seqlen)
    extras = [torch.randn(heads)] if spec.sinks.value != "none" else []
    args = prepare(KernelVariant.of(variant_of(spec)), q, extras, [], batch)
    return rt.BwdCall(dout=dout, q=q, k=k, v=v, out=out, lse=lse, dlse=None, softmax_scale=scale, args=args,
                      seqs=Seqlens.dense(q, k))


def _packed(lengths: list[int], heads: int, d: int, scale: float) -> rt.BwdCall:
    total = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)

    def t() -> Any:
        return torch.randn(1, total, heads, d).to(torch.bfloat16)

    q, k, v, out, dout = t(), t(), t(), t(), t()
    seqs = Seqlens.packed(q[0], cu, cu, max(lengths), max(lengths))
    args = prepare(KernelVariant.of(variant_of(VARLEN)), q, [], [], seqs.batch)
    return rt.BwdCall(dout=dout, q=q, k=k, v=v, out=out, lse=torch.randn(1, heads, total), dlse=None,
                      softmax_scale=scale, args=args, seqs=seqs)


def test_geometry_is_the_layouts_and_sizes_not_the_data() -> None:
    a, b = _dense(2, 256, 4, 64, 0.1, SINKS), _dense(2, 256, 4, 64, 0.2, SINKS)
    assert a.geometry() == b.geometry() and hash(a.geometry()) == hash(b.geometry())
    strided = rt.BwdCall(**{**vars(b), "q": b.q.transpose(1, 2).contiguous().transpose(1, 2)})
    longer = _dense(2, 384, 4, 64, 0.1, SINKS)
    with_dlse = rt.BwdCall(**{**vars(b), "dlse": torch.randn(2, 4, 256)})
    keys = {a.geometry(), strided.geometry(), longer.geometry(), with_dlse.geometry(),
            _packed([100, 156], 4, 64, 0.1).geometry(), _packed([156, 100], 4, 64, 0.1).geometry()}
    # The two packed batches differ only in their lengths' values: one geometry (the lengths are read per call).
    assert len(keys) == 5


def test_ready_cache_makes_once_and_evicts_the_oldest() -> None:
    cache: ReadyCache[int] = ReadyCache(size=2)
    calls = [_dense(1, n, 2, 64, 0.1, SINKS) for n in (64, 128, 192)]
    made: list[int] = []

    def make(i: int) -> Any:
        return lambda: made.append(i) or i

    assert [cache.get(c.geometry(), make(i)) for i, c in enumerate(calls[:2])] == [0, 1]
    assert cache.get(calls[0].geometry(), make(9)) == 0 and made == [0, 1]
    cache.get(calls[2].geometry(), make(2))          # evicts calls[1], the least recently used
    assert len(cache) == 2 and cache.get(calls[1].geometry(), make(5)) == 5 and made == [0, 1, 2, 5]


def _same_buffers(monkeypatch: pytest.MonkeyPatch, plan: Any, call: rt.BwdCall, seen: Launched) -> None:
    """Every run gets the buffers and the tile table of one allocation (else each run's pointers differ); a table
    built is recorded with the lengths it was built from."""
    fixed = sm90_bwd_ready._buffers(plan, call)
    monkeypatch.setattr(sm90_bwd_ready, "_buffers", lambda plan, call: fixed)
    store = torch.zeros(5 * call.seqs.batch + 4, dtype=torch.int32)
    table = tile_table.TileTable(rows=store[:-call.seqs.batch].view(-1, 4), order=store[-call.seqs.batch:])

    def build(fn: Any, stream: int, seqs: Seqlens, side: tile_table.TileSide) -> tile_table.TileTable:
        seen.append((fn.name, (1, 1, 1), side.tile_rows, bytes(seqs.cu_seqlens_q.numpy())))
        return table

    monkeypatch.setattr(tile_table, "build", build)


@pytest.mark.parametrize("case", ["dense_sinks", "packed"])
def test_hopper_backward_prepared_from_one_call_runs_another(case: str, launched: Launched,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SINKS if case == "dense_sinks" else VARLEN
    bwd = plan_bwd(spec, Arch.sm90)
    family = backward_family(bwd.family)
    if case == "packed":
        first, second = _packed([300, 77, 500], 2, 128, 0.09), _packed([500, 300, 77], 2, 128, 0.11)
    else:
        first, second = _dense(2, 320, 4, 64, 0.125, spec), _dense(2, 320, 4, 64, 0.0625, spec)
    assert first.geometry() == second.geometry()
    _same_buffers(monkeypatch, bwd, second, launched)
    family.prepare(bwd, _function, second).run(second, stream=7)
    expected = list(launched)
    launched.clear()
    ready = family.prepare(bwd, _function, first)
    ready.run(first, stream=7)
    from_first = list(launched)
    launched.clear()
    ready.run(second, stream=7)
    assert launched == expected
    assert from_first != expected                    # the test sees a stale field when there is one
    entries = [e for e, *_ in launched]
    assert entries[-3:] == list(bwd.entry_names[:3])  # preprocess, dK/dV, dq_convert
    if case == "packed":
        assert entries[0].endswith("_tiles")          # the flat preprocess grid's table, built per call
    hopper = ready.hopper.struct.from_buffer_copy(launched[-2][3])
    assert (hopper.q, hopper.dout) == (second.q.data_ptr(), second.dout.data_ptr())
    assert hopper.softmax_scale == pytest.approx(second.softmax_scale)
    kept = ready.hopper.struct.from_buffer_copy(ready.hopper.data)
    assert not kept.q and not kept.dq and kept.softmax_scale == 0   # the template holds no call's values


def test_template_and_call_fields_are_the_whole_block() -> None:
    """param_block = the template's fields + a call's fields, for a call other than the template's."""
    bwd = plan_bwd(SINKS, Arch.sm90)
    first, second = _dense(1, 128, 4, 64, 0.2, SINKS), _dense(1, 128, 4, 64, 0.3, SINKS)
    b = sm90_bwd_ready._buffers(bwd, second)
    from attngen.codegen.abi import HOPPER_BWD_PARAMS, with_variant

    fields = with_variant(HOPPER_BWD_PARAMS, second.args.fields)
    template = rt.param_template(fields, sm90_bwd_ready._buffers(bwd, first), first)
    made = template.make(lambda p: rt.call_fields(p, b, second))
    assert bytes(made) == bytes(rt.param_block(fields, b, second))


@pytest.mark.parametrize("arch", [Arch.sm80, Arch.sm90])
def test_forward_prepared_from_one_call_runs_another(arch: Arch, launched: Launched) -> None:
    fwd = plan(SINKS, arch)
    family = forward_family(fwd.family)
    fn = _function(fwd.kernel_name, fwd.smem_bytes)

    def call(scale: float) -> FwdCall:
        b = _dense(2, 192, 4, 64, scale, SINKS)
        return FwdCall(q=b.q, k=b.k, v=b.v, out=torch.empty_like(b.q), lse=torch.empty(2, 4, 192),
                       softmax_scale=scale, args=b.args, seqs=b.seqs)

    first, second = call(0.1), call(0.2)
    family.prepare(fwd, fn, second).run(second, stream=3)
    family.prepare(fwd, fn, first).run(first, stream=3)
    expected, from_first = launched
    launched.clear()
    ready = family.prepare(fwd, fn, first)
    ready.run(second, stream=3)
    assert launched == [expected] and from_first != expected
    assert launched[0][1] == (-(-192 // fwd.block_m), 4, 2)
