"""The content-addressed kernel cache: key stability, hits, corruption, concurrency (CPU only)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attngen import env
from attngen.errors import CompileError
from attngen.planning.planner import plan
from attngen.spec.model import AttentionSpec
from attngen.toolchain import cache, compiler
from attngen.toolchain.artifacts import KernelSource

REPO = Path(__file__).resolve().parents[1]

TINY = """
extern "C" __global__ void tiny_scale(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
"""


def make_source(code: str = TINY, *, head_dim: int = 64, arch: str = "sm80") -> KernelSource:
    p = plan(AttentionSpec(head_dim=head_dim, dtype="bf16"), arch)
    return KernelSource(plan=p, code=code, entry_names=("tiny_scale",), spec_hash=p.spec.spec_hash())


def child_environment() -> dict[str, str]:
    """This environment, with the repository first on PYTHONPATH (for `python -m attngen...`)."""
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ATTNGEN_CACHE_DIR", str(root))
    return root


@pytest.fixture(scope="module")
def source() -> KernelSource:
    return make_source()


def _files(entry: Path, source: KernelSource) -> tuple[Path, Path, Path]:
    name = source.plan.kernel_name
    return entry / f"{name}.cu", entry / f"{name}.cubin", entry / "meta.json"


# ---- the key -----------------------------------------------------------------------------------
def test_key_is_stable(source):
    key = cache.cache_key(source, "sm_80", compiler.compile_options("sm_80"))
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache.cache_key(make_source(), "sm_80", compiler.compile_options("sm_80")) == key
    assert cache.cache_key(source) == key  # defaults: the plan's target and its options


def test_key_changes_with_what_changes_the_output(source, monkeypatch):
    opts = compiler.compile_options("sm_80")
    base = cache.cache_key(source, "sm_80", opts)
    variants = {
        "spec": cache.cache_key(make_source(head_dim=128), "sm_80", opts),
        "arch": cache.cache_key(make_source(arch="sm86"), "sm_80", opts),
        "target": cache.cache_key(source, "sm_86", opts),
        "options": cache.cache_key(source, "sm_80", (*opts, "-DEXTRA=1")),
        "source": cache.cache_key(make_source(TINY + "// edited\n"), "sm_80", opts),
    }
    patches = {
        "nvrtc": lambda m: m.setattr(compiler, "nvrtc_version", lambda: "99.9"),
        "templates": lambda m: m.setattr(cache, "generator_hash", lambda: "0" * 64),
        "version": lambda m: m.setattr(cache, "__version__", "999.0"),
        "environment": lambda m: (m.setattr(env, "KEY_VARIABLES", ("ATTNGEN_TEST_KNOB",)),
                                  m.setenv("ATTNGEN_TEST_KNOB", "1")),
    }
    for what, patch in patches.items():
        with monkeypatch.context() as m:
            patch(m)
            variants[what] = cache.cache_key(source, "sm_80", opts)
    assert cache.cache_key(source, "sm_80", opts) == base
    for what, key in variants.items():
        assert key != base, what
    assert len(set(variants.values())) == len(variants)


def test_generator_hash_follows_template_files(tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "attn.cu.j2").write_text("// v1\n")
    monkeypatch.setattr(cache, "templates_dir", lambda: templates)
    cache._generator_hash_of.cache_clear()
    try:
        first = cache.generator_hash()
        (templates / "attn.cu.j2").write_text("// v2\n")
        cache._generator_hash_of.cache_clear()
        edited = cache.generator_hash()
        (templates / "new.cuh").write_text("")
        cache._generator_hash_of.cache_clear()
        added = cache.generator_hash()
        (templates / ".attn.cu.j2.swp").write_text("editor noise")
        cache._generator_hash_of.cache_clear()
        assert cache.generator_hash() == added
    finally:
        cache._generator_hash_of.cache_clear()
    assert len({first, edited, added}) == 3


# ---- hits and misses ---------------------------------------------------------------------------
def test_miss_then_hit(source, cache_root):
    built = cache.compile_cached(source)
    assert not built.from_cache and built.cache_key
    entry = cache_root / built.cache_key[:2] / built.cache_key
    cu, cubin, meta = _files(entry, source)
    assert cu.read_text() == source.code and cubin.read_bytes() == built.data
    info = json.loads(meta.read_text())
    assert info["kernel_name"] == source.plan.kernel_name and info["spec_hash"] == source.spec_hash
    assert info["nvrtc_version"] == compiler.nvrtc_version() and info["options"] == list(built.options)
    assert info["resources"][0]["name"] == "tiny_scale"

    start = time.perf_counter()
    hit = cache.compile_cached(source)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.1, f"cached load took {elapsed * 1e3:.1f} ms"
    assert hit.from_cache and hit.cache_key == built.cache_key
    assert hit.data == built.data and hit.resources == built.resources
    assert hit.options == built.options and hit.target == "sm_80"
    assert hit.extra["compile_seconds"] == built.extra["compile_seconds"]
    assert cache.lookup(source) is not None


def test_lookup_never_compiles(source, cache_root):
    assert cache.lookup(source) is None
    assert not cache_root.exists() or cache.cache_info()["entries"] == 0


@pytest.mark.parametrize("damage", ["truncate_cubin", "flip_cubin", "drop_meta", "bad_json", "drop_cu"])
def test_damaged_entry_is_rebuilt(source, damage):
    built = cache.compile_cached(source)
    cu, cubin, meta = _files(Path(built.extra["cache_path"]), source)
    if damage == "truncate_cubin":
        cubin.write_bytes(built.data[: len(built.data) // 2])
    elif damage == "flip_cubin":
        cubin.write_bytes(built.data[:-1] + bytes([built.data[-1] ^ 0xFF]))
    elif damage == "drop_meta":
        meta.unlink()
    elif damage == "bad_json":
        meta.write_text(meta.read_text()[:40])
    else:
        cu.unlink()
    assert cache.lookup(source) is None
    rebuilt = cache.compile_cached(source)
    assert not rebuilt.from_cache and rebuilt.data == built.data
    assert cubin.read_bytes() == built.data and cu.is_file() and json.loads(meta.read_text())
    assert cache.compile_cached(source).from_cache


def test_cache_dir_variable_moves_the_cache(source, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("ATTNGEN_CACHE_DIR", str(elsewhere))
    built = cache.compile_cached(source)
    assert Path(built.extra["cache_path"]).is_relative_to(elsewhere)
    assert (elsewhere / built.cache_key[:2] / built.cache_key / "meta.json").is_file()
    assert cache.cache_info()["path"] == str(elsewhere)


def test_compile_error_leaves_no_entry(cache_root):
    broken = make_source('extern "C" __global__ void tiny_scale(float* x) { x[0] = nope; }\n')
    with pytest.raises(CompileError):
        cache.compile_cached(broken)
    assert cache.cache_info()["entries"] == 0
    assert cache.cache_info()["failed_sources"] == 1


def test_info_and_clear(source):
    cache.compile_cached(source)
    cache.compile_cached(dataclasses.replace(source, code=TINY + "// second\n"))
    info = cache.cache_info()
    assert info["entries"] == 2 and info["bytes"] > 0
    assert cache.clear_cache() == 2
    assert cache.cache_info()["entries"] == 0
    assert not cache.compile_cached(source).from_cache


# ---- two processes, one key --------------------------------------------------------------------
CHILD = """
import hashlib, json, sys, time
from pathlib import Path
from attngen.toolchain import cache
from tests.test_cache import make_source
src = make_source()
print("ready", flush=True)
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.002)
c = cache.compile_cached(src)
print(json.dumps({"sha": hashlib.sha256(c.data).hexdigest(), "from_cache": c.from_cache, "key": c.cache_key}))
"""


def test_two_processes_build_one_key(source, tmp_path, cache_root):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    go = tmp_path / "go"
    child_env = child_environment()
    procs = [subprocess.Popen([sys.executable, str(script), str(go)], cwd=REPO, env=child_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["sha"] == results[1]["sha"]
    assert results[0]["key"] == results[1]["key"] == cache.cache_key(source)
    assert sorted(r["from_cache"] for r in results) == [False, True]  # exactly one compiled
    assert cache.cache_info()["entries"] == 1
    assert not list(cache_root.rglob(".tmp-*"))
    assert cache.compile_cached(source).from_cache


def test_templates_folder_override(tmp_path, monkeypatch):
    """ATTNGEN_TEMPLATES renders from another folder, and its files change the cache key's generator hash."""
    import shutil

    from attngen.codegen.renderer import render
    from attngen.paths import templates_dir
    from attngen.planning.planner import plan
    from attngen.spec.model import AttentionSpec

    spec_plan = plan(AttentionSpec(head_dim=64, dtype="fp16"), "sm80")
    shipped, shipped_hash = render(spec_plan).code, cache.generator_hash()
    copy = tmp_path / "templates"
    shutil.copytree(templates_dir(), copy)
    top = copy / "attn_fwd.cu.j2"
    top.write_text(top.read_text().replace("// generated by attngen", "// A/B variant, generated by attngen"))
    monkeypatch.setenv("ATTNGEN_TEMPLATES", str(copy))
    assert templates_dir() == copy
    assert render(spec_plan).code.startswith("// A/B variant") and cache.generator_hash() != shipped_hash
    monkeypatch.delenv("ATTNGEN_TEMPLATES")
    assert render(spec_plan).code == shipped and cache.generator_hash() == shipped_hash
