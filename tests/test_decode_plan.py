"""The decode family on the CPU: its plan and budget per arch, the split rule, the argument checks of a
KV-cache call that picks it, and its registry entry (the kernels themselves: tests/test_gpu_decode.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attngen import families
from attngen.errors import PlanError
from attngen.families import sm80_decode
from attngen.families.base import Direction
from attngen.planning.archs import arch_info
from attngen.planning.ir_decode import DecodeRole
from attngen.planning.planner_decode import MAX_DECODE_QUERY, plan_decode
from attngen.planning.splits import (
    COMBINE_COST_TILES,
    MAX_SPLITS,
    MIN_TILES_PER_SPLIT,
    WAVES_MAX_TILES,
    WAVES_MIN_FILL,
    choose_role,
    choose_splits,
)
from attngen.runtime.kvcache import _use_decode
from attngen.spec.model import HEAD_DIMS, Arch, AttentionSpec


def test_registry_has_a_decode_family() -> None:
    fam = families.get("sm80_decode")
    assert fam.direction is Direction.decode
    serving, refused = families.serving(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), Arch.sm90,
                                        Direction.decode)
    assert [f.name for f in serving] == ["sm80_decode"] and not refused


@pytest.mark.parametrize("arch", list(Arch))
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_every_head_dim_plans_within_the_budget(arch: Arch, head_dim: int) -> None:
    info = arch_info(arch)
    spec = AttentionSpec(head_dim=head_dim, dtype="fp16", mask="causal")
    if head_dim >= 192 and info.smem_per_block < 110_000:
        # 99 KB per block holds no two stages of 64-key hd192 K/V tiles: KV-cache calls run the forward kernels.
        with pytest.raises(PlanError, match=f"no decode tiling of spec .* fits {arch.value}: .*shared memory"):
            plan_decode(spec, arch)
        return
    plan = plan_decode(spec, arch)
    assert plan.smem_bytes <= info.smem_per_block and plan.blocks_per_sm >= 1
    assert plan.spec.seqlens.value == "varlen"  # the cache's used keys per entry
    assert plan.kernel_name == f"attn_decode_causal_hd{head_dim}_fp16_{arch.value}_splitkv"
    assert plan.entry_names == (f"{plan.kernel_name}_split", f"{plan.kernel_name}_combine")
    # The merge rows of every warp fit in the stages region they reuse.
    stages = plan.smem.offset("Stats") - plan.smem.offset("Stages")
    assert stages >= plan.tiling.num_warps * 16 * (head_dim + sm80_decode.MERGE_PAD) * 4
    rejected = [c for c in plan.candidates if not c.fits]
    assert all("shared memory" in c.reason or "registers" in c.reason or "resident" in c.reason for c in rejected)


def test_hopper_hd128_keeps_128_kb_in_flight_with_128_key_tiles() -> None:
    plan = plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), Arch.sm90)
    assert (plan.tiling.warp_keys, plan.tiling.stages, plan.blocks_per_sm) == (32, 3, 1)
    assert "128 KB of K/V in flight" in plan.reason
    wide = plan_decode(AttentionSpec(head_dim=256, dtype="bf16", mask="causal"), Arch.sm90)
    assert wide.tiling.tile_keys == 64  # 128-key stages of hd256 do not fit three deep


def test_the_waves_tiling_holds_more_blocks_per_sm_and_builds_kernels_of_its_own() -> None:
    """sm90 hd128: the stream plan (128-key tiles x 3, one block/SM) names the waves tiling, the best-ranked of more
    blocks per SM (64 x 3, two: 128 KB in flight too); its plan has kernels of its own name and says why."""
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    stream = plan_decode(spec, Arch.sm90)
    assert stream.role is DecodeRole.stream and stream.waves_blocks_per_sm == 2
    assert stream.waves_tiling is not None and (stream.waves_tiling.warp_keys, stream.waves_tiling.stages) == (16, 3)
    waves = plan_decode(spec, Arch.sm90, DecodeRole.waves)
    assert waves.role is DecodeRole.waves and waves.waves_tiling is None
    assert (waves.tiling, waves.blocks_per_sm, waves.min_blocks_per_sm) == (stream.waves_tiling, 2, 2)
    assert waves.kernel_name == stream.kernel_name + "_waves" and waves.summary()["role"] == "waves"
    assert "more blocks per SM than the stream tiling's 1" in waves.reason and "128 KB" in waves.reason
    assert 2 * waves.smem_bytes <= arch_info(Arch.sm90).smem_per_sm


def test_the_waves_tiling_keeps_as_many_bytes_in_flight() -> None:
    """A waves tiling holds more blocks per SM without fewer K/V bytes in flight (up to INFLIGHT_TARGET): sm80 hd64's
    64-key x 3 at three blocks keeps the stream tiling's 96 KB; sm80 hd128's only tiling of two blocks keeps 64 KB
    against 96, so it has none; sm86's holds no second block at all."""
    hd64 = plan_decode(AttentionSpec(head_dim=64, dtype="bf16", mask="causal"), Arch.sm80)
    assert hd64.waves_tiling is not None and hd64.waves_blocks_per_sm == 3
    waves = plan_decode(AttentionSpec(head_dim=64, dtype="bf16", mask="causal"), Arch.sm80, DecodeRole.waves)
    stream_flight = next(c for c in hd64.candidates if c.tiling == hd64.tiling).inflight_bytes
    assert next(c for c in waves.candidates if c.tiling == waves.tiling).inflight_bytes >= stream_flight
    for arch in (Arch.sm80, Arch.sm86):
        plan = plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), arch)
        assert plan.waves_tiling is None, arch
        flight = next(d for d in plan.candidates if d.tiling == plan.tiling).inflight_bytes
        more = [c for c in plan.candidates if c.fits and c.blocks_per_sm > plan.blocks_per_sm]
        assert all(c.inflight_bytes < flight for c in more) and (more or arch is Arch.sm86), arch
        with pytest.raises(PlanError, match="with as many bytes in flight"):
            plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), arch, DecodeRole.waves)


def test_a_spec_without_a_waves_tiling_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one tiling in the search space, nothing holds more blocks per SM: every call runs the stream tiling, and
    asking for the waves plan names why."""
    monkeypatch.setattr(sm80_decode, "WARP_KEYS", (32,))
    monkeypatch.setattr(sm80_decode, "STAGES", (3,))
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    stream = plan_decode(spec, Arch.sm90)
    assert stream.waves_tiling is None and stream.waves_blocks_per_sm == 0
    with pytest.raises(PlanError, match="holds more than the stream tiling's 1 blocks per SM"):
        plan_decode(spec, Arch.sm90, DecodeRole.waves)
    family = families.get("sm80_decode")
    assert family.role(stream, batch=64, kv_heads=8, heads=32, seqlen_q=1, keys=1024).role is DecodeRole.stream  # type: ignore[attr-defined]


def test_role_rule() -> None:
    """The waves tiling once the unsplit blocks fill WAVES_MIN_FILL waves of the stream tiling's slots and keep at
    most WAVES_MAX_TILES of its tiles."""
    rule = {"num_sms": 132, "stream_blocks_per_sm": 1, "waves_blocks_per_sm": 2}
    slots = int(WAVES_MIN_FILL * 132)
    assert choose_role(blocks=slots, tiles=8, **rule).role is DecodeRole.waves
    below = choose_role(blocks=slots - 1, tiles=8, **rule)
    assert below.role is DecodeRole.stream and "fewer than" in below.reason
    assert choose_role(blocks=512, tiles=WAVES_MAX_TILES, **rule).role is DecodeRole.waves
    long_ = choose_role(blocks=512, tiles=WAVES_MAX_TILES + 1, **rule)
    assert long_.role is DecodeRole.stream and f"more than {WAVES_MAX_TILES}" in long_.reason
    assert "at 2 blocks/SM" in choose_role(blocks=512, tiles=8, **rule).reason
    assert choose_role(blocks=512, tiles=8, **{**rule, "waves_blocks_per_sm": 0}).role is DecodeRole.stream
    family = families.get("sm80_decode")
    plan = plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), Arch.sm90)

    def role(batch: int, keys: int = 1024, seqlen_q: int = 1, **kw: int) -> DecodeRole:
        return family.role(plan, batch=batch, kv_heads=8, heads=32, seqlen_q=seqlen_q, keys=keys, **kw).role  # type: ignore[attr-defined,no-any-return]

    # 32 query heads over 8 KV heads, one query: a block per (entry, KV head); 16 queries: 4 blocks per KV head.
    assert {b: role(b) for b in (1, 8, 16, 17, 32)} == {1: DecodeRole.stream, 8: DecodeRole.stream,
                                                        16: DecodeRole.stream, 17: DecodeRole.waves,
                                                        32: DecodeRole.waves}
    assert role(5, seqlen_q=16) is DecodeRole.waves and role(32, num_sms=528) is DecodeRole.stream
    # 128-key tiles: 8k keys are 64 tiles, one more key is 65.
    assert role(64, keys=8192) is DecodeRole.waves and role(64, keys=8193) is DecodeRole.stream


#: Peak DRAM bandwidths (runtime.device.dram_gbps): H100 SXM 2619 MHz x 5120 bits, H200 3201 MHz x 6144 bits.
H100, H200 = 3352.3, 4917.0


def test_split_rule() -> None:
    one = {"kv_heads": 8, "row_blocks": 1, "tile_keys": 128, "num_sms": 132, "blocks_per_sm": 1, "dram_gbps": H100}
    assert choose_splits(batch=1, keys=32768, **one).splits == 16          # one wave: 8 x 16 = 128 of 132
    assert choose_splits(batch=1, keys=1024, **one).splits == 1024 // 128 // MIN_TILES_PER_SPLIT  # tile-capped
    short = choose_splits(batch=6, keys=1024, **one)   # 2 splits would save 4 of 8 tiles: not worth a combine
    assert short.splits == 1 and f"~{COMBINE_COST_TILES} tiles" in short.reason
    assert choose_splits(batch=6, keys=32768, **one).splits == 2         # 48 blocks: one wave of 96
    # 64 blocks, one per SM pair: unsplit at every length; over a paged cache, the one-wave rule.
    for keys in (1024, 4096, 32768, 131072):
        pairs = choose_splits(batch=8, keys=keys, **one)
        assert pairs.splits == 1 and "one per SM pair of 66" in pairs.reason
    assert choose_splits(batch=8, keys=32768, paged=True, **one).splits == 2
    assert choose_splits(batch=10, keys=32768, paged=True, **one).splits == 3
    # Past one block per pair: the fewest splits whose waves fill to 90% (80 x 3 = 240 of 264, 96 x 4 = 384 of
    # 396), each of 8 tiles at least (none at 1k keys).
    assert [choose_splits(batch=10, keys=k, **one).splits for k in (1024, 4096, 32768)] == [1, 3, 3]
    balanced = choose_splits(batch=12, keys=32768, **one)
    assert balanced.splits == 4 and "97%" in balanced.reason
    # 31 tiles: 4 splits would keep 7 each, and 3 fill their waves to 73% only.
    assert "no split of at most 8" in choose_splits(batch=12, keys=4096 - 128, **one).reason
    # Two blocks per SM: the one-wave rule (the pairs' rules are measured with one).
    assert choose_splits(batch=8, keys=32768, **{**one, "blocks_per_sm": 2}).splits == 4
    full = choose_splits(batch=64, keys=32768, **one)
    assert full.splits == 1 and "no split" in full.reason
    tiny = choose_splits(batch=1, keys=128, **one)
    assert tiny.splits == 1 and "too few to split" in tiny.reason
    many = choose_splits(batch=1, kv_heads=1, row_blocks=1, keys=1 << 24, tile_keys=64, num_sms=1000,
                         blocks_per_sm=4, dram_gbps=H100)
    assert many.splits == MAX_SPLITS


def test_one_block_per_pair_splits_where_its_streams_fall_short_of_the_bandwidth() -> None:
    """batch 8 x 8 KV heads: 64 blocks stream ~3 TB/s, the H100's copy bandwidth but 0.61 of the H200's."""
    one = {"kv_heads": 8, "row_blocks": 1, "tile_keys": 128, "num_sms": 132, "blocks_per_sm": 1}
    for keys in (4096, 32768, 131072):
        h200 = choose_splits(batch=8, keys=keys, dram_gbps=H200, **one)
        assert h200.splits == 2, h200.reason
        assert "reach 61% of the device's 4917 GB/s: short of 80%, so the one-wave rule" in h200.reason
        assert choose_splits(batch=8, keys=keys, dram_gbps=H100, **one).splits == 1
    # Too short to pay for the combine either way, and the reason still says why the pairs' rule did not hold.
    short = choose_splits(batch=8, keys=1024, dram_gbps=H200, **one)
    assert short.splits == 1 and "combine costs" in short.reason and "short of 80%" in short.reason
    # The threshold, exactly: 64 blocks x 47 GB/s = 3008 reach 80% of 3760 GB/s and not of one more.
    assert choose_splits(batch=8, keys=32768, dram_gbps=3760, **one).splits == 1
    assert choose_splits(batch=8, keys=32768, dram_gbps=3761, **one).splits == 2
    # Other batches do not ask the bandwidth: the one-wave rule below the pairs, the balance rule past them.
    for batch in (1, 6, 10, 12, 64):
        assert (choose_splits(batch=batch, keys=32768, dram_gbps=H200, **one)
                == choose_splits(batch=batch, keys=32768, dram_gbps=H100, **one))


def test_a_decode_call_asks_its_device_for_the_bandwidth() -> None:
    """The family's default is the arch's flagship; a call passes its device's figure through."""
    plan = plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), Arch.sm90)
    family = families.get("sm80_decode")
    shape = {"batch": 8, "kv_heads": 8, "heads": 32, "seqlen_q": 1, "keys": 32768}
    assert family.splits(plan, **shape).splits == 1  # type: ignore[attr-defined]
    assert family.splits(plan, dram_gbps=H200, **shape).splits == 2  # type: ignore[attr-defined]
    assert family.splits(plan, dram_gbps=H200, paged=True, **shape).splits == 2  # type: ignore[attr-defined]


def test_explain_lines_give_the_rule_at_example_shapes() -> None:
    plan = plan_decode(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), Arch.sm90)
    lines = families.get("sm80_decode").explain_lines(plan)  # type: ignore[attr-defined]
    assert lines[0].startswith("decode (sm80_decode") and "tile_keys=128" in lines[0]
    assert any("at batch 1," in line and "131072 keys: the stream tiling" in line and "16 splits" in line
               for line in lines)
    assert "waves tiling (calls whose blocks fill whole waves): 64-key tiles x 3 stages, 2 blocks/SM" in lines[2]
    assert any("at batch 32," in line and "1024 keys: the waves tiling" in line and "1 splits" in line
               for line in lines)
    assert any("at batch 64," in line and "32768 keys: the stream tiling" in line and "256 tiles" in line
               for line in lines)


def test_kvcache_call_picks_the_decode_kernels_by_query_length() -> None:
    short, long_ = SimpleNamespace(shape=(2, MAX_DECODE_QUERY, 8, 64)), SimpleNamespace(shape=(2, 17, 8, 64))
    assert _use_decode(short, None, 0) and not _use_decode(long_, None, 0)
    assert not _use_decode(short, False, 0) and _use_decode(short, True, 7)
    with pytest.raises(ValueError, match="split_kv=True: the decode kernels take at most 16"):
        _use_decode(long_, True, 0)
    with pytest.raises(ValueError, match="num_splits must be an int from 0"):
        _use_decode(short, None, MAX_SPLITS + 1)
    with pytest.raises(ValueError, match="num_splits applies to the split-KV decode kernels"):
        _use_decode(short, False, 3)
    with pytest.raises(ValueError, match="split_kv must be None"):
        _use_decode(short, "yes", 0)
