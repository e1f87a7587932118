"""attngen.build: manifests, artifact files, arch resolution, and building many variants."""

from __future__ import annotations

import importlib
import json
import os
import stat
from pathlib import Path

import pytest

from attngen.errors import PlanError, SpecError
from attngen.planning.planner import plan
from attngen.spec.model import Arch, AttentionSpec
from attngen.toolchain.artifacts import Cubin, KernelResources, KernelSource

MANIFEST_KEYS = {"spec", "arch", "plan", "kernels", "nvrtc_version", "cache_key", "attngen_version",
                 "kernel_name"}
KERNEL_KEYS = {"name", "registers", "spill_stores", "spill_loads", "smem_bytes"}
#: The module, not the function `attngen.build` that the package binds under the same name.
B = importlib.import_module("attngen.toolchain.builder")


def _spec(**kw: object) -> AttentionSpec:
    data: dict[str, object] = {"head_dim": 128, "dtype": "bf16", "mask": "causal"}
    data.update(kw)
    return AttentionSpec.model_validate(data)


def _fake_cubin(spec: AttentionSpec, arch: Arch, *, from_cache: bool = False) -> Cubin:
    """A Cubin as compile_cached returns one, from the real plan but without NVRTC."""
    p = plan(spec, arch)
    source = KernelSource(plan=p, code=f"// {p.kernel_name}\n", entry_names=(p.kernel_name,),
                          spec_hash=spec.spec_hash())
    res = KernelResources(name=p.kernel_name, registers=128, spill_stores=0, spill_loads=0,
                          smem_bytes=p.smem_bytes)
    return Cubin(source=source, data=b"\x7fELF fake", target=arch.value, nvrtc_version="12.8",
                 options=("--std=c++17",), resources=(res,), cache_key="ab" * 32, from_cache=from_cache)


def test_manifest_shape() -> None:
    spec = _spec(name="m")
    m = B.manifest(_fake_cubin(spec, Arch.sm90), compile_seconds=1.23456)
    assert MANIFEST_KEYS <= set(m) <= MANIFEST_KEYS | {"compile_seconds"}
    assert m["spec"] == spec.model_dump(mode="json")
    assert m["arch"] == "sm90"
    assert m["plan"] == plan(spec, Arch.sm90).summary()
    for key in ("block_m", "block_n", "num_warps", "stages", "smem_bytes", "pipeline"):
        assert key in m["plan"]
    assert [set(k) >= KERNEL_KEYS for k in m["kernels"]] == [True]
    assert m["nvrtc_version"] == "12.8" and m["cache_key"] == "ab" * 32
    assert m["compile_seconds"] == 1.235
    json.dumps(m)  # serialisable as it is


def test_manifest_without_known_time_has_no_compile_seconds() -> None:
    assert "compile_seconds" not in B.manifest(_fake_cubin(_spec(), Arch.sm80))


def test_write_artifacts(tmp_path: Path) -> None:
    spec = _spec(name="w")
    cubin = _fake_cubin(spec, Arch.sm80)
    target = B.write_artifacts(cubin, tmp_path)
    assert target == tmp_path / "w" / "sm80"
    names = sorted(p.name for p in target.iterdir())
    assert names == sorted(["kernel.cu", "manifest.json", f"{cubin.source.plan.kernel_name}.cubin"])
    assert (target / "kernel.cu").read_text() == cubin.source.code
    assert json.loads((target / "manifest.json").read_text())["arch"] == "sm80"
    B.write_artifacts(cubin, tmp_path)  # rewriting over existing files leaves no temporaries
    assert len(list(target.iterdir())) == 3


def test_resolve_archs() -> None:
    own = _spec(arch=["sm86", "sm90"])
    assert B.resolve_archs(own, None) == (Arch.sm86, Arch.sm90)
    assert B.resolve_archs(own, ["sm100"]) == (Arch.sm100,)
    with pytest.raises(SpecError, match="--arch"):
        B.resolve_archs(_spec(), None)
    assert B.resolve_archs(_spec(), ("sm80",)) == (Arch.sm80,)


def test_variants_dedupe_and_order() -> None:
    a, b = _spec(name="a"), _spec(name="b", head_dim=64)
    got = B.variants([a, b, a], ["sm80", "sm90"])
    assert [(s.name, x.value) for s, x in got] == [("a", "sm80"), ("a", "sm90"), ("b", "sm80"), ("b", "sm90")]


def test_build_many_reports_failure_and_builds_the_rest(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_build(spec: AttentionSpec, arch: Arch | str) -> Cubin:
        arch = Arch(arch)
        if spec.name == "bad" and arch is Arch.sm90:
            raise PlanError("no tiling fits (test)")
        if spec.name == "bad":
            raise RuntimeError("boom")
        return _fake_cubin(spec, arch, from_cache=arch is Arch.sm80)

    monkeypatch.setattr(B, "build", fake_build)
    monkeypatch.setattr(B, "try_build_bwd", lambda spec, arch: "not built in this test")
    seen: list[tuple[str, str, int, int]] = []
    results = B.build_many([_spec(name="good"), _spec(name="bad")], ["sm80", "sm90"], tmp_path, jobs=1,
                           progress=lambda r, done, total: seen.append((r.spec_name, r.arch, done, total)))
    assert [(r.spec_name, r.arch, r.ok) for r in results] == [
        ("good", "sm80", True), ("good", "sm90", True), ("bad", "sm80", False), ("bad", "sm90", False)]
    assert [s[2:] for s in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert results[2].error == "RuntimeError: boom"
    assert results[3].error == "no tiling fits (test)"
    assert results[0].cached and not results[1].cached
    assert results[1].plan["block_m"] > 0 and results[1].spills == 0 and results[1].registers == 128
    for arch in ("sm80", "sm90"):
        assert (tmp_path / "good" / arch / "manifest.json").is_file()
    assert not (tmp_path / "bad").exists()


def test_build_many_without_arch_raises_before_building(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="pass --arch"):
        B.build_many([_spec()], None, tmp_path, jobs=1)
    assert not any(tmp_path.iterdir())


def test_build_many_parallel_real_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes, the real render and NVRTC; one variant fails in the planner."""
    monkeypatch.setenv("ATTNGEN_CACHE_DIR", str(tmp_path / "cache"))
    # 128 x 128 tiles at hd256 with 3 stages: too big for every arch's shared memory.
    too_big = _spec(name="too_big", head_dim=256, mask="none", tiles={"block_m": 128, "block_n": 128},
                    pipeline={"kind": "multistage", "stages": 3})
    ok = _spec(name="fine", head_dim=64, dtype="fp16")
    results = B.build_many([ok, too_big], ["sm80", "sm90"], tmp_path / "out", jobs=2)
    assert [(r.spec_name, r.arch, r.ok) for r in results] == [
        ("fine", "sm80", True), ("fine", "sm90", True),
        ("too_big", "sm80", False), ("too_big", "sm90", False)]
    assert all("no tiling" in (r.error or "") for r in results[2:]), results[2].error
    for r in results[:2]:
        assert r.spills == 0
        assert r.out_dir is not None and (r.out_dir / "kernel.cu").is_file()
        assert sorted(p.name.split("_")[1] for p in r.out_dir.glob("*.cubin")) == ["bwd", "fwd"]


def test_build_replans_around_spills(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiling ptxas spills on is excluded with the reason and the spec planned again."""
    import dataclasses

    from attngen.toolchain import cache

    real = cache.compile_cached
    first: list[object] = []

    def spill_once(source):  # type: ignore[no-untyped-def]
        cubin = real(source)
        if not first:
            first.append(source.plan.tiling)
            res = dataclasses.replace(cubin.resources[0], spill_stores=16, spill_loads=16)
            return dataclasses.replace(cubin, resources=(res,))
        return cubin

    monkeypatch.setattr(cache, "compile_cached", spill_once)
    spec = AttentionSpec(head_dim=64, dtype="bf16")
    cubin = B.build(spec, "sm90")
    plan = cubin.source.plan
    assert plan.tiling != first[0]
    rejected = [c for c in plan.candidates if c.tiling == first[0]]
    assert rejected and "spilled 32 B" in rejected[0].reason and not rejected[0].fits
    assert isinstance(cubin.resources[0], KernelResources) and cubin.resources[0].spill_stores == 0


def test_artifacts_carry_the_backward_kernels(tmp_path: Path) -> None:
    spec = _spec(head_dim=64)
    cubin, bwd = B.build(spec, "sm90"), B.build_bwd(spec, "sm90")
    target = B.write_artifacts(cubin, tmp_path, bwd=bwd)
    data = json.loads((target / "manifest.json").read_text())
    names = [k["name"] for k in data["kernels"]]
    assert names[0] == cubin.source.plan.kernel_name
    assert sorted(n for n in names if "bwd" in n) == sorted(bwd.source.plan.entry_names)
    # hd64 on sm90: the sm90_bwd family's plan (its own cubin: preprocess and the wgmma dK/dV kernel)
    assert data["backward_plan"]["family"] == "sm90_bwd" and data["backward_plan"]["dkdv_wgmma"]["block_n"] > 0
    assert (target / "kernel_bwd.cu").is_file() and (target / f"{bwd.source.plan.kernel_name}.cubin").is_file()
    unavailable = B.manifest(cubin, bwd="the budget cannot hold it")
    assert unavailable["backward"].startswith("not available") and len(unavailable["kernels"]) == 1


def test_prepare_out_dir(tmp_path: Path) -> None:
    from attngen.errors import OutputError

    assert B.prepare_out_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())  # no probe left
    (tmp_path / "f").write_text("x")
    for bad, words in (("", "empty name"), ("  ", "empty name"), (tmp_path / "f", "is a file"),
                       (tmp_path / "f" / "sub", "cannot write")):
        with pytest.raises(OutputError, match=words):
            B.prepare_out_dir(bad)


def test_build_many_refuses_a_bad_out_before_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attngen.errors import OutputError

    monkeypatch.setattr(B, "build", lambda *a: pytest.fail("compiled despite a bad out_dir"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError):
        B.build_many([_spec()], ["sm80"], tmp_path / "f")


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_outputs_follow_the_umask(tmp_path: Path, umask: int) -> None:
    """Build outputs and cache entries get 0666 / 0777 less the umask, like any other build tool's."""
    from attngen.atomic import staged_dir, write_atomic

    old = os.umask(umask)
    try:
        target = B.write_artifacts(_fake_cubin(_spec(name="u"), Arch.sm80), tmp_path)
        with staged_dir(tmp_path / "entry", "e") as tmp:
            write_atomic(tmp / "meta.json", b"{}")
    finally:
        os.umask(old)
    for folder in (target, tmp_path / "entry"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask
        for path in folder.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_write_artifacts_interrupted_leaves_the_old_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write stopped half-way (an interrupt) leaves the previous variant folder whole and no temporaries."""
    import attngen.atomic as atomic

    cubin = _fake_cubin(_spec(name="i"), Arch.sm80)
    target = B.write_artifacts(cubin, tmp_path)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    calls = []

    def stop_on_third(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        original(path, data)

    original = atomic.write_atomic
    monkeypatch.setattr(B, "write_atomic", stop_on_third)
    with pytest.raises(KeyboardInterrupt):
        B.write_artifacts(cubin, tmp_path)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "i").iterdir()) == ["sm80"]
