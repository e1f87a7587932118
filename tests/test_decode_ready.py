"""A decode call's prepared launches on the CPU (no GPU needed): the family's launch steps per shape, the
parameter block ReadyDecode keeps and the one a run launches, and the key under which runtime.kvcache
remembers an eager call's checks."""

from __future__ import annotations

import ctypes

import pytest

torch = pytest.importorskip("torch")

from attngen.planning.ir_decode import DecodeRole  # noqa: E402
from attngen.planning.planner_decode import DecodeShape, plan_decode  # noqa: E402
from attngen.runtime import decode, device_checks, kvcache  # noqa: E402
from attngen.runtime.driver import LoadedFunction  # noqa: E402
from attngen.spec.model import Arch, AttentionSpec  # noqa: E402

SPEC = AttentionSpec(name="d", head_dim=64, dtype="bf16", mask="causal")


@pytest.mark.parametrize("arch", [Arch.sm80, Arch.sm90])
def test_steps_are_the_split_kernel_then_the_combine(arch: Arch) -> None:
    plan = plan_decode(SPEC, arch)
    family = decode.decode_family(plan.family)
    split, combine = family.steps(plan, DecodeShape(batch=3, heads=32, kv_heads=8, seqlen_q=5, num_splits=4))
    # 4 query heads per KV head x 5 rows = 20 packed rows: two 16-row blocks per (entry, KV head).
    assert (split.entry, split.grid, split.threads, split.smem_bytes) == \
        (plan.entry_names[0], (2, 4, 24), plan.threads, plan.smem_bytes)
    assert not split.dependent
    # A warp per output row: 3 x 32 x 5 rows over 4 warps a block.
    assert (combine.entry, combine.grid, combine.smem_bytes) == (plan.entry_names[1], (120, 1, 1), 0)
    assert combine.dependent is (arch is Arch.sm90) is plan.overlap_combine
    (only,) = family.steps(plan, DecodeShape(batch=3, heads=32, kv_heads=8, seqlen_q=1, num_splits=1))
    assert only.grid == (1, 1, 24)


def _fields(struct: type[ctypes.Structure], raw: bytes) -> dict[str, object]:
    p = struct.from_buffer_copy(raw)
    return {name: getattr(p, name) for name, *_ in struct._fields_ if name != "tail_pad"}


#: The device checks' counters as a test's launches see them (runtime.device_checks).
_WORDS = (ctypes.c_uint32 * 2)()
CHECKS = device_checks.Counters(host=ctypes.addressof(_WORDS), device=0x7F00)


@pytest.fixture
def ready_env(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """DecodeKernels without a GPU: sm90, 132 SMs, entry points that are names, launches recorded."""
    launched: list[tuple[object, ...]] = []
    monkeypatch.setattr(decode, "current_arch", lambda device=None: Arch.sm90)
    monkeypatch.setattr(decode, "sm_count", lambda index: 132)
    monkeypatch.setattr(decode, "dram_gbps", lambda index: 3352.3)   # an H100's (runtime.device.dram_gbps)
    monkeypatch.setattr(decode.DecodeKernels, "_function",
                        lambda self, index, arch, entry, smem, source=None: LoadedFunction(entry, None, 4096, smem))
    monkeypatch.setattr(decode, "stream_handle", lambda index: 77)
    monkeypatch.setattr(decode.device_checks, "counters", lambda index: CHECKS)

    def record(self: decode.PreparedLaunch, stream: int, params: ctypes.Structure) -> None:
        launched.append((self.fn.name, self.grid, self.threads, stream, bytes(params), self.dependent))

    monkeypatch.setattr(decode.PreparedLaunch, "__call__", record)
    return launched


def test_ready_keeps_the_shape_fields_and_a_run_adds_the_pointers(ready_env: list[tuple[object, ...]],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = decode.DecodeKernels(SPEC)
    pool = torch.randn(40, 32, 2, 64).to(torch.bfloat16)      # a paged pool of 32-row pages
    table = torch.arange(36, dtype=torch.int32).view(3, 12)     # 3 entries of 12 pages: capacity 384
    q = torch.randn(3, 2, 16, 64).to(torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)  # strided q
    ready = kernels.ready(q, pool, pool, table, num_splits=3)
    assert ready.shape == DecodeShape(batch=3, heads=16, kv_heads=2, seqlen_q=2, num_splits=3)
    kept = _fields(ready.struct, ready.template)
    assert {k: kept[k] for k in ("seqlen_q", "seqlen_k", "heads", "kv_heads", "batch", "num_splits", "page_size",
                                 "table_stride", "page_magic", "page_shift", "q_batch_stride", "q_row_stride",
                                 "q_head_stride", "k_batch_stride", "k_row_stride", "o_batch_stride", "o_row_stride",
                                 "o_head_stride", "lse_batch_stride", "lse_head_stride")} == {
        "seqlen_q": 2, "seqlen_k": 384, "heads": 16, "kv_heads": 2, "batch": 3, "num_splits": 3, "page_size": 32,
        "table_stride": 12, "page_magic": 2**31, "page_shift": 4, "q_batch_stride": 2048, "q_row_stride": 64,
        "q_head_stride": 128,
        "k_batch_stride": 4096, "k_row_stride": 128, "o_batch_stride": 2048, "o_row_stride": 1024,
        "o_head_stride": 64, "lse_batch_stride": 32, "lse_head_stride": 2}
    # The pool's 40 blocks (an entry at or past them is refused on the device) and where the kernels count that.
    assert (kept["num_blocks"], kept["check_counts"]) == (40, 0x7F00)
    assert not any(kept[k] for k in ("q", "o", "block_table", "o_part"))   # pointers come per run (0 is None)

    monkeypatch.setenv("ATTNGEN_POISON", "1")
    used = torch.tensor([5, 384, 0], dtype=torch.int32)
    out, lse = ready.run(q, pool, pool, used, table, 0.125, kernels.args(q, [], []))
    assert out.shape == q.shape and out.is_contiguous() and lse.shape == (3, 16, 2)
    assert out.float().isnan().all() and lse.isnan().all()      # nothing ran: the poison shows
    (split, combine) = ready_env
    assert [s[0] for s in ready_env] == list(sm80_decode_entries()) and split[3] == combine[3] == 77
    assert split[4] == combine[4] and combine[5] is True
    sent = _fields(ready.struct, split[4])  # type: ignore[arg-type]
    assert (sent["q"], sent["k"], sent["o"], sent["lse"], sent["seqused_k"], sent["block_table"]) == \
        (q.data_ptr(), pool.data_ptr(), out.data_ptr(), lse.data_ptr(), used.data_ptr(), table.data_ptr())
    assert sent["scale_log2"] == pytest.approx(0.125 * 1.4426950408889634)
    # The partials share one allocation: o_part (3 splits x 96 rows x 64) then lse_part.
    assert sent["lse_part"] - sent["o_part"] == 3 * 96 * 64 * 4   # type: ignore[operator]
    assert {k: sent[k] for k in kept if k not in POINTERS} == {k: v for k, v in kept.items() if k not in POINTERS}


POINTERS = {"q", "k", "v", "o", "lse", "seqused_k", "block_table", "o_part", "lse_part", "scale_log2"}


def sm80_decode_entries() -> tuple[str, str]:
    return plan_decode(SPEC, Arch.sm90).entry_names


def test_one_split_launches_the_split_kernel_alone(ready_env: list[tuple[object, ...]]) -> None:
    kernels = decode.DecodeKernels(SPEC)
    k = torch.randn(2, 64, 2, 64).to(torch.bfloat16)
    q = torch.randn(2, 1, 4, 64).to(torch.bfloat16)
    ready = kernels.ready(q, k, k, None, num_splits=1)
    ready.run(q, k, k, torch.tensor([3, 64], dtype=torch.int32), None, 1.0, kernels.args(q, [], []))
    assert len(ready_env) == 1
    sent = _fields(ready.struct, ready_env[0][4])  # type: ignore[arg-type]
    assert not any(sent[k] for k in ("o_part", "lse_part", "block_table", "page_size", "page_magic", "num_blocks"))
    assert sent["check_counts"] == 0x7F00


@pytest.mark.parametrize(("gbps", "splits"), [(3352.3, 1), (4917.0, 2), (None, 1)])
def test_the_split_count_follows_the_devices_bandwidth(ready_env: list[tuple[object, ...]],
                                                       monkeypatch: pytest.MonkeyPatch, gbps: float | None,
                                                       splits: int) -> None:
    """batch 8 x 8 KV heads over 32k keys: 64 blocks, one per SM pair, stream an H100's DRAM bandwidth unsplit but
    not an H200's (planning.splits); where the driver reports no memory clock the arch's figure stands in."""
    monkeypatch.setattr(decode, "dram_gbps", lambda index: gbps)
    kernels = decode.DecodeKernels(SPEC)
    k = torch.empty(1, 1, 8, 64, dtype=torch.bfloat16).expand(8, 32768, 8, 64)   # strides only: nothing is read
    q = torch.randn(8, 1, 32, 64).to(torch.bfloat16)
    assert kernels.ready(q, k, k, None).shape.num_splits == splits
    assert kernels.ready(q, k, k, None, num_splits=3).shape.num_splits == 3      # a caller's count stands


def test_calls_that_fill_whole_waves_run_the_waves_kernels(ready_env: list[tuple[object, ...]]) -> None:
    """batch 40 x 8 KV heads (320 blocks, 2.4 waves of the stream tiling's 132 slots) launches the waves tiling's
    kernels with its shared memory; batch 8 (64 blocks) the stream tiling's."""
    kernels = decode.DecodeKernels(SPEC)
    k = torch.empty(1, 1, 8, 64, dtype=torch.bfloat16).expand(40, 1024, 8, 64)   # strides only: nothing is read
    big = kernels.ready(torch.randn(40, 1, 32, 64).to(torch.bfloat16), k, k, None)
    waves = plan_decode(SPEC, Arch.sm90, DecodeRole.waves)
    assert big.role is DecodeRole.waves and big.shape.num_splits == 1
    (launch,) = big.launches
    assert (launch.fn.name, launch.fn.smem_bytes) == (waves.entry_names[0], waves.smem_bytes)
    small = kernels.ready(torch.randn(8, 1, 32, 64).to(torch.bfloat16), k[:8], k[:8], None)
    assert small.role is DecodeRole.stream and small.launches[0].fn.name == plan_decode(SPEC, Arch.sm90).entry_names[0]


def _call(q: object, k: object, used: object, table: object = None, options: tuple[object, ...] = (None, None, 0)) \
        -> object:
    return kvcache._call_key(q, k, k, used, table, options)


def test_call_key_is_the_tensors_metadata_and_the_typed_options() -> None:
    q, k = torch.randn(2, 1, 8, 64), torch.randn(2, 128, 2, 64)
    used = torch.tensor([1, 2], dtype=torch.int32)
    key = _call(q, k, used)
    assert key is not None and hash(key) is not None
    # Other storage, other values, same metadata: the same key.
    assert _call(torch.randn(2, 1, 8, 64), torch.randn(2, 128, 2, 64), torch.tensor([7, 9], dtype=torch.int32)) \
        == key
    assert _call(q, k, used, torch.zeros(2, 4, dtype=torch.int32)) != key
    for other in (torch.randn(2, 8, 1, 64).transpose(1, 2), torch.randn(2, 1, 8, 64).half(),
                  torch.randn(3, 1, 8, 64)):
        assert _call(other, k, used) != key
    assert _call(q, k, used.long()) != key
    assert _call(q, k, used, options=(None, None, True)) != _call(q, k, used, options=(None, None, 1))
    assert _call(q, k, used, options=(0.5, None, 0)) != key


class _Sub(torch.Tensor):
    pass


def test_call_key_sends_anything_unusual_down_the_checked_path(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k = torch.randn(2, 1, 8, 64), torch.randn(2, 128, 2, 64)
    used = torch.tensor([1, 2], dtype=torch.int32)
    assert _call(q, k, 5) is None                      # an int cache_seqlens
    assert _call(q.as_subclass(_Sub), k, used) is None
    assert _call(q, k, used, table=[[0]]) is None
    assert _call(q, k, used, options=([1], None, 0)) is None
    assert _call(q, k, used, options=(torch.tensor(1.0), None, 0)) is None
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _call(q, k, used) is None


def test_a_prepared_dependent_launch_keeps_its_configuration() -> None:
    from attngen.runtime.driver import PreparedLaunch

    fn = LoadedFunction("combine", None, 4096, 2048)
    dependent = PreparedLaunch(fn, (7, 2, 3), 128, dependent=True)
    config = dependent._config
    assert config is not None
    assert (config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.sharedMemBytes,
            config.numAttrs) == (7, 2, 3, 128, 2048, 1)
    # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, allowed.
    assert (config.attrs[0].id, config.attrs[0].value[0]) == (6, 1)
    assert PreparedLaunch(fn, (7, 2, 3), 128)._config is None


@pytest.mark.parametrize("page", [*kvcache.PAGE_SIZES, 2, 3, 7, 1000, 4095])
def test_page_divisor_divides_every_key_exactly(page: int) -> None:
    """The kernels' page_of (umulhi by the magic, then the shift) is key // page below 2**31: at every multiple of
    the page and beside it, over the whole range, and on random keys."""
    magic, shift = decode.page_divisor(page)
    assert 0 < magic < 2**32 and shift >= 0
    gen = torch.Generator().manual_seed(page)
    keys = torch.cat([torch.arange(0, 1 << 20), torch.randint(0, 2**31, (1 << 20,), generator=gen, dtype=torch.int64),
                      torch.arange(2**31 - (1 << 16), 2**31)])
    edges = torch.arange(page, 2**31, max(page, 2**31 // (1 << 20) // page * page), dtype=torch.int64)
    keys = torch.cat([keys, edges - 1, edges, edges + 1]).clamp(0, 2**31 - 1)
    got = ((keys * magic) >> 32) >> shift
    assert torch.equal(got, keys // page)



def test_dram_gbps_is_two_transfers_a_memory_clock_over_the_bus(monkeypatch: pytest.MonkeyPatch) -> None:
    from attngen.errors import LaunchError
    from attngen.runtime import device, driver

    interface = [3201000, 6144]   # an H200's memory clock and bus, in kHz and bits
    monkeypatch.setattr(driver, "memory_interface", lambda index: tuple(interface))
    device.dram_gbps.cache_clear()
    try:
        assert device.dram_gbps(0) == pytest.approx(4917.0, abs=0.5)
        interface[0] = 0
        device.dram_gbps.cache_clear()
        assert device.dram_gbps(0) is None

        def refused(index: int) -> tuple[int, int]:
            raise LaunchError("cuDeviceGetAttribute(MEMORY_CLOCK_RATE) failed: CUDA_ERROR_INVALID_VALUE")

        monkeypatch.setattr(driver, "memory_interface", refused)
        device.dram_gbps.cache_clear()
        assert device.dram_gbps(0) is None      # a driver that refuses the question: the arch's figure, no error
    finally:
        device.dram_gbps.cache_clear()


def test_memory_interface_asks_the_driver_for_the_clock_and_the_bus(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from cuda.bindings import driver as cuda

    from attngen.runtime import driver

    values = {cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: 3201000,
              cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: 6144}
    ok = cuda.CUresult.CUDA_SUCCESS
    fake = SimpleNamespace(CUresult=cuda.CUresult, CUdevice_attribute=cuda.CUdevice_attribute,
                           cuInit=lambda flags: (ok,), cuDeviceGet=lambda index: (ok, 100 + index),
                           cuDeviceGetAttribute=lambda attribute, dev: (ok, values[attribute] + dev - 101))
    monkeypatch.setattr(driver, "_driver", lambda: fake)
    assert driver.memory_interface(1) == (3201000, 6144)
