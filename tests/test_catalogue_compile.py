"""Every catalogue spec compiles through NVRTC for sm80, sm90 and sm100 with zero spills; the
budget-binding specs compile for the other generations too. No GPU needed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import attngen
from attngen.catalogue import load_catalogue
from attngen.planning.archs import arch_info
from attngen.spec.model import Arch

CATALOGUE = load_catalogue()
CI_ARCHS = (Arch.sm80, Arch.sm90, Arch.sm100)
OTHER_ARCHS = (Arch.sm86, Arch.sm89, Arch.sm120)


@pytest.fixture(scope="module")
def catalogue_cubins() -> dict:
    todo = [(spec, arch) for spec in CATALOGUE for arch in CI_ARCHS]
    # NVRTC releases the GIL while compiling: threads use both cores.
    with ThreadPoolExecutor(max_workers=2) as pool:
        cubins = list(pool.map(lambda job: attngen.build(*job), todo))
    return {(spec.name, arch): cubin for (spec, arch), cubin in zip(todo, cubins, strict=True)}


def test_catalogue_has_the_required_variants() -> None:
    have = {(s.dtype.value, s.head_dim, s.mask.kind.value) for s in CATALOGUE if s.is_plain}
    for dtype in ("fp16", "bf16"):
        for head_dim in (64, 128, 256):
            for mask in ("none", "causal"):
                assert (dtype, head_dim, mask) in have
    assert {96, 192} <= {s.head_dim for s in CATALOGUE}
    assert any(s.mask.kind.value == "sliding_window" for s in CATALOGUE)
    # The model variants: Gemma 2 local and global, Mistral, Llama 4 chunked, gpt-oss, BLOOM, prefix-LM,
    # document masks, streaming.
    names = {s.name for s in CATALOGUE}
    assert {"gemma2_local_bf16_hd256", "gemma2_global_bf16_hd256", "mistral_bf16_hd128", "llama4_chunked_bf16_hd128",
            "gpt_oss_bf16_hd64", "bloom_alibi_bf16_hd128", "prefix_lm_bf16_hd128", "document_bf16_hd128",
            "streaming_bf16_hd128"} <= names
    assert len(CATALOGUE) >= 12


@pytest.mark.parametrize("arch", CI_ARCHS, ids=lambda a: a.value)
def test_catalogue_compiles_with_zero_spills(catalogue_cubins: dict, arch: Arch) -> None:
    for spec in CATALOGUE:
        cubin = catalogue_cubins[(spec.name, arch)]
        assert cubin.data[:4] == b"\x7fELF", f"{spec.name} {arch.value}: not a cubin"
        assert cubin.target == arch_info(arch).nvrtc_target
        (res,) = cubin.resources
        assert res.name == cubin.source.plan.kernel_name
        assert 0 < res.registers <= 255
        assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), \
            f"{spec.name} on {arch.value} spills: {res}"
        assert not res.wgmma_serialized, f"{spec.name} on {arch.value}: ptxas serialized its wgmmas (C7512)"


@pytest.mark.parametrize("arch", OTHER_ARCHS, ids=lambda a: a.value)
def test_budget_bound_specs_compile_for_other_generations(arch: Arch) -> None:
    for spec in CATALOGUE:
        plain_causal = spec.is_plain and spec.mask.kind.value == "causal"
        if spec.head_dim not in (128, 256) or not plain_causal or spec.dtype.value != "bf16":
            continue
        cubin = attngen.build(spec, arch)
        assert cubin.source.plan.smem_bytes <= arch_info(arch).smem_per_block
        (res,) = cubin.resources
        assert (res.spill_stores, res.spill_loads) == (0, 0), f"{spec.name} on {arch.value} spills: {res}"


@pytest.mark.parametrize("arch", CI_ARCHS, ids=lambda a: a.value)
def test_catalogue_backward_compiles_with_zero_spills(arch: Arch) -> None:
    import importlib

    build = importlib.import_module("attngen.toolchain.builder")
    todo = [spec for spec in CATALOGUE]
    with ThreadPoolExecutor(max_workers=2) as pool:
        cubins = list(pool.map(lambda spec: build.build_bwd(spec, arch), todo))
    for spec, cubin in zip(todo, cubins, strict=True):
        names = sorted(r.name for r in cubin.resources)
        plan = cubin.source.plan
        assert names == sorted(plan.entry_names) and all("bwd" in n for n in names)
        dkdv = plan.dkdv_wgmma if plan.family == "sm90_bwd" else plan.dkdv
        assert dkdv.smem_bytes <= arch_info(arch).smem_per_block
        for res in cubin.resources:
            assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), \
                f"{spec.name} backward on {arch.value} spills: {res}"
            assert not res.wgmma_serialized, f"{spec.name} backward on {arch.value}: ptxas serialized its wgmmas"


def test_sm90_catalogue_runs_the_hopper_pipelines_on_hgmma(catalogue_cubins: dict) -> None:
    """On sm90 `auto` lowers every catalogue spec it can to warp_specialized or ping-pong: each such
    variant (there must be at least three) builds without spills and its SASS holds HGMMA."""
    from attngen.toolchain.sass import disassemble, opcodes

    hopper = [(spec, catalogue_cubins[(spec.name, Arch.sm90)]) for spec in CATALOGUE
              if catalogue_cubins[(spec.name, Arch.sm90)].source.plan.pipeline.is_hopper]
    assert len(hopper) >= 3
    assert {c.source.plan.pipeline.value for _, c in hopper} == {"warp_specialized", "pingpong"}
    for spec, cubin in hopper:
        (res,) = cubin.resources
        assert (res.spill_stores, res.spill_loads) == (0, 0), f"{spec.name}: {res}"
        ops = opcodes(disassemble(cubin.data))
        assert ops["HGMMA"] > 0 and ops["HMMA"] == 0, f"{spec.name}: {dict(ops)}"


#: Varlen twins that spill, with the bytes ptxas stored and why; any other spill fails, a listed one may not grow,
#: and one that no longer spills fails until it is taken off the list.
#: (The mma.sync dQ kernel of causal_fp16_hd192 on sm90 spilled 12 B here until the wgmma kernel took hd192 over.)
VARLEN_SPILLS_KNOWN: dict[tuple[str, Arch, str], tuple[int, str]] = {}


@pytest.mark.parametrize("arch", CI_ARCHS, ids=lambda a: a.value)
def test_catalogue_varlen_twins_compile(arch: Arch) -> None:
    """The varlen twin (per-entry lengths: packed sequences, KV caches) of every catalogue spec, forward and
    backward, compiles; spills only as VARLEN_SPILLS_KNOWN says."""
    from attngen.spec.model import SeqlensKind
    from attngen.toolchain.builder import build_bwd

    twins = [spec.with_seqlens(SeqlensKind.varlen) for spec in CATALOGUE]
    with ThreadPoolExecutor(max_workers=2) as pool:
        forward = list(pool.map(lambda spec: attngen.build(spec, arch), twins))
        backward = list(pool.map(lambda spec: build_bwd(spec, arch), twins))
    spilled = {}
    for spec, fwd, bwd in zip(twins, forward, backward, strict=True):
        assert "kVarlen = true" in fwd.source.code and "kVarlen = true" in bwd.source.code
        for res in (*fwd.resources, *bwd.resources):
            if res.spill_stores or res.stack_bytes:
                spilled[(spec.name.removesuffix("_varlen"), arch, res.name)] = res.spill_stores
    for key, stores in spilled.items():
        assert key in VARLEN_SPILLS_KNOWN, f"{key} spills {stores} B"
        assert stores <= VARLEN_SPILLS_KNOWN[key][0], f"{key} spills {stores} B, more than listed"
    for key in VARLEN_SPILLS_KNOWN:
        if key[1] is arch:
            assert key in spilled, f"{key} no longer spills: take it off VARLEN_SPILLS_KNOWN"


@pytest.mark.parametrize("arch", CI_ARCHS, ids=lambda a: a.value)
def test_catalogue_decode_kernels_compile_with_zero_spills(arch: Arch) -> None:
    """The split-KV decode kernels (split and combine) of every catalogue spec, of its stream tiling and of its waves
    tiling where the budget holds one, compile without spills."""
    from attngen.planning.ir_decode import DecodeRole
    from attngen.planning.planner_decode import plan_decode
    from attngen.toolchain.builder import build_decode

    todo = [(spec, DecodeRole.stream) for spec in CATALOGUE]
    todo += [(spec, DecodeRole.waves) for spec in CATALOGUE if plan_decode(spec, arch).waves_tiling is not None]
    assert arch is Arch.sm80 or any(role is DecodeRole.waves for _, role in todo)
    with ThreadPoolExecutor(max_workers=2) as pool:
        cubins = list(pool.map(lambda job: build_decode(job[0], arch, job[1]), todo))
    for (spec, _), cubin in zip(todo, cubins, strict=True):
        names = {res.name for res in cubin.resources}
        assert names == set(cubin.source.plan.entry_names), f"{spec.name}: {names}"
        for res in cubin.resources:
            assert not (res.spill_stores or res.stack_bytes), f"{spec.name} {arch.value} {res.name} spills"


def test_deterministic_hopper_backward_of_the_catalogue_compiles_with_zero_spills() -> None:
    """deterministic on sm90 runs the wgmma kernel with ordered dQ reductions: every catalogue spec, and its varlen
    twin, compiles without spills (at hd64/128 the producer's semaphore wait and passes, at hd192/256 the split's
    consumers waiting for their turn)."""
    from attngen.planning.shared import schedule_words
    from attngen.spec.model import SeqlensKind
    from attngen.toolchain.builder import build_bwd

    todo = []
    for spec in CATALOGUE:
        if spec.head_dim % 64 or schedule_words(spec):   # hd96 and masks with holes: the mma.sync kernels
            continue
        det = spec.model_copy(update={"deterministic": True, "name": f"{spec.name}_det"})
        todo += [det, det.model_copy(update={"seqlens": SeqlensKind.varlen, "name": f"{det.name}_varlen"})]
    with ThreadPoolExecutor(max_workers=2) as pool:
        cubins = list(pool.map(lambda spec: build_bwd(spec, Arch.sm90), todo))
    for spec, cubin in zip(todo, cubins, strict=True):
        assert cubin.source.plan.family == "sm90_bwd" and cubin.source.plan.dkdv_wgmma.ordered_dq, spec.name
        for res in cubin.resources:
            assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), f"{spec.name}: {res}"


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_hopper_forward_softmax_traits_compile_with_zero_spills(head_dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sm90 forward's softmax traits: conditional rescaling (on by default) and, where the ablation asks for it,
    the polynomial exp2 on part of the score tiles: both reach the kernel and compile without spills."""
    from attngen.families import sm90_fwd
    from attngen.spec.model import AttentionSpec

    monkeypatch.setattr(sm90_fwd, "EXP2_POLY_TILES", {head_dim: 4})
    for mask in ("none", "causal"):
        spec = AttentionSpec(name=f"poly_hd{head_dim}_{mask}", head_dim=head_dim, dtype="bf16", mask=mask)
        cubin = attngen.build(spec, Arch.sm90)
        code = cubin.source.code
        assert "constexpr int kExp2PolyTiles = 4;" in code, spec.name
        assert f"constexpr float kRescaleThreshold = {sm90_fwd.RESCALE_THRESHOLD}f;" in code, spec.name
        for res in cubin.resources:
            assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), f"{spec.name}: {res}"


def test_hopper_forward_own_ranges_reach_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """sm90_fwd.OWN_RANGES (on by default) reaches the plan, explain's lines and the kernel, with HALF_TILES where the
    tiles allow it; on and off, a causal hd64 forward (192-row blocks, three consumer warpgroups) and a windowed hd256
    one compile without spills and without serialized wgmmas."""
    from attngen.families import sm90_fwd
    from attngen.spec.model import AttentionSpec

    assert sm90_fwd.OWN_RANGES is True
    for own in (True, False):
        monkeypatch.setattr(sm90_fwd, "OWN_RANGES", own)
        for d, extra in ((64, {"mask": "causal"}), (256, {"mask": "sliding_window", "window": [100, 0]})):
            spec = AttentionSpec(name=f"own{int(own)}_hd{d}", head_dim=d, dtype="bf16", **extra)
            cubin = attngen.build(spec, Arch.sm90)
            plan = cubin.source.plan
            assert plan.roles is not None and plan.roles.own_ranges is own
            # Half tiles need own ranges and an even count of P V k-steps (hd256's block_n 80 has five).
            assert plan.roles.half_tiles is (own and d == 64)
            assert ("constexpr bool kHalfTiles = true;" in cubin.source.code) is (own and d == 64)
            assert f"constexpr bool kOwnRanges = {'true' if own else 'false'};" in cubin.source.code
            lines = attngen.families.get("sm90_fwd").explain_lines(plan)
            assert any(("its own 64 query rows" in line) is own for line in lines if line.startswith("KV ranges"))
            for res in cubin.resources:
                assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), f"{spec.name}: {res}"
                assert not res.wgmma_serialized, f"{spec.name}: {res}"
