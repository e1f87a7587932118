"""NVRTC compilation and the ptxas resource report (CPU only: NVRTC needs no GPU)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from attngen.errors import CompileError
from attngen.planning.planner import plan
from attngen.spec.model import AttentionSpec
from attngen.toolchain import compiler
from attngen.toolchain.artifacts import KernelResources, KernelSource

REPO = Path(__file__).resolve().parents[1]

TINY = """
extern "C" __global__ void tiny_add(float* x, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}
"""

STATIC_SMEM = """
extern "C" __global__ void reverse_tile(float* out) {
  __shared__ float tile[1024];
  tile[threadIdx.x] = out[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[1023 - threadIdx.x];
}
"""

# 64 live accumulators under a 32-register cap (1024 threads x 2 blocks per SM) must spill.
FORCED_SPILL = """
extern "C" __global__ void __launch_bounds__(1024, 2) spill_heavy(float* out, const float* in, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[i * n + threadIdx.x];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + 1) & 63] + in[k * 64 + i];
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  out[threadIdx.x] = s;
}
"""

SYNTAX_ERROR = 'extern "C" __global__ void broken(float* x) { x[0] = undefined_thing; }\n'

# ---- reports captured from NVRTC 13.5 (-Xptxas=-v) over the kernels above and a C++ template ----
LOG_SM80 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4tmplILi3EEvPf' for 'sm_80'
ptxas info    : Function properties for _Z4tmplILi3EEvPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 13.930 ms
ptxas info    : Compiling entry function 'smem' for 'sm_80'
ptxas info    : Function properties for smem
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 1.825 ms
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
ptxas         .     2048 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 2048 bytes cumulative stack size, 372 bytes cmem[0]
ptxas info    : Compile time = 17.890 ms
ptxas info    : Compiling entry function 'add' for 'sm_80'
ptxas info    : Function properties for add
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 372 bytes cmem[0]
ptxas info    : Compile time = 1.657 ms
"""

LOG_SM90A = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'smem' for 'sm_90a'
ptxas info    : Function properties for smem
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 2.178 ms
"""

LOG_SPILL = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
ptxas         .     272 bytes stack frame, 488 bytes spill stores, 492 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 272 bytes cumulative stack size, 372 bytes cmem[0]
ptxas info    : Compile time = 28.100 ms
"""

# Older ptxas: the properties line unprefixed, no barrier count, a spill warning, a device function.
LOG_LEGACY = (
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function '_Z6kernelPfi' for 'sm_80'\n"
    "ptxas info    : Function properties for _Z6helperf\n"
    "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
    "ptxas info    : Function properties for _Z6kernelPfi\n"
    "    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas warning : Registers are spilled to local memory in function '_Z6kernelPfi', "
    "8 bytes spill stores, 12 bytes spill loads\n"
    "ptxas info    : Used 255 registers, 49152 bytes smem, 356 bytes cmem[0]\n"
)


# NVRTC 13.5 on sm_90a: ptxas's advisory that it serialized a kernel's wgmmas (captured from an 80-query backward step
# that issued dQ's product beside P^T's and dS^T's packed copies).
LOG_SERIALIZED = (
    "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
    "insufficient register resources for the function 'attn_dkdv'\n"
    "ptxas info    : Compiling entry function 'attn_dkdv' for 'sm_90a'\n"
    "ptxas info    : Function properties for attn_dkdv\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 168 registers, used 16 barriers\n"
    "ptxas info    : Compiling entry function 'attn_convert' for 'sm_90a'\n"
    "ptxas info    : Function properties for attn_convert\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 0 barriers\n"
)


def child_environment() -> dict[str, str]:
    """This environment, with the repository first on PYTHONPATH (for `python -m attngen...`)."""
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


@pytest.fixture(scope="module")
def plans():
    spec = AttentionSpec(head_dim=64, dtype="bf16")
    return {arch: plan(spec, arch) for arch in ("sm80", "sm90", "sm100")}


def make_source(plans, code: str, entries: tuple[str, ...], arch: str = "sm80") -> KernelSource:
    p = plans[arch]
    return KernelSource(plan=p, code=code, entry_names=entries, spec_hash=p.spec.spec_hash())


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNGEN_CACHE_DIR", str(tmp_path / "cache"))


# ---- parser over captured logs -----------------------------------------------------------------
def test_parse_nvrtc13_sm80_report():
    got = compiler.parse_ptxas_report(LOG_SM80)
    assert [r.name for r in got] == ["_Z4tmplILi3EEvPf", "smem", "spill", "add"]
    assert got[0] == KernelResources("_Z4tmplILi3EEvPf", 8, 0, 0, 0, 0)
    assert got[1] == KernelResources("smem", 10, 0, 0, 4096, 0)
    assert got[2] == KernelResources("spill", 32, 0, 0, 0, 2048)
    assert got[3].registers == 10


def test_parse_sm90a_report_without_cmem():
    (got,) = compiler.parse_ptxas_report(LOG_SM90A)
    assert got == KernelResources("smem", 10, 0, 0, 4096, 0)


def test_parse_spills():
    (got,) = compiler.parse_ptxas_report(LOG_SPILL)
    assert (got.spill_stores, got.spill_loads, got.stack_bytes, got.registers) == (488, 492, 272, 32)


def test_parse_serialized_wgmma_names_its_function():
    dkdv, convert = compiler.parse_ptxas_report(LOG_SERIALIZED)
    assert (dkdv.name, dkdv.wgmma_serialized, dkdv.spill_stores, dkdv.registers) == ("attn_dkdv", True, 0, 168)
    assert (convert.name, convert.wgmma_serialized) == ("attn_convert", False)
    assert dkdv.as_manifest()["wgmma_serialized"] is True
    assert not compiler.parse_ptxas_report(LOG_SM90A)[0].wgmma_serialized


def test_parse_serialized_wgmma_of_an_ill_formed_pipeline_stage():
    log = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
           "wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage "
           "in the function 'attn_dkdv' in line 7111\n") + LOG_SERIALIZED.split("\n", 1)[1]
    dkdv, convert = compiler.parse_ptxas_report(log)
    assert (dkdv.name, dkdv.wgmma_serialized, convert.wgmma_serialized) == ("attn_dkdv", True, False)


def test_parse_legacy_format_keeps_device_functions_apart():
    (got,) = compiler.parse_ptxas_report(LOG_LEGACY)
    assert got.name == "_Z6kernelPfi"
    assert (got.registers, got.smem_bytes, got.stack_bytes) == (255, 49152, 16)
    assert (got.spill_stores, got.spill_loads) == (8, 12)


def test_parse_empty_and_error_logs():
    assert compiler.parse_ptxas_report("") == ()
    assert compiler.parse_ptxas_report('k.cu(1): error: identifier "x" is undefined\n') == ()


# ---- toolchain facts ---------------------------------------------------------------------------
def test_nvrtc_version_is_major_minor():
    assert re.fullmatch(r"\d+\.\d+", compiler.nvrtc_version())


def test_compile_options():
    opts = compiler.compile_options("sm_90a")
    for wanted in ("-std=c++17", "-default-device", "-Xptxas=-v", "-lineinfo", "--gpu-architecture=sm_90a"):
        assert wanted in opts
    assert not any("fast_math" in o or "fast-math" in o for o in opts)
    includes = [o[2:] for o in opts if o.startswith("-I")]
    assert all(not p.startswith("/usr/local/cuda") for p in includes)
    assert all((Path(p) / "cuda_fp16.h").is_file() for p in includes)


# ---- real compiles -----------------------------------------------------------------------------
@pytest.mark.parametrize(("arch", "target"), [("sm80", "sm_80"), ("sm90", "sm_90a"), ("sm100", "sm_100a")])
def test_compile_tiny_kernel(plans, arch, target):
    cubin = compiler.compile_source(make_source(plans, TINY, ("tiny_add",), arch))
    assert cubin.target == target
    assert cubin.data[:4] == b"\x7fELF"
    assert f"--gpu-architecture={target}" in cubin.options
    assert cubin.nvrtc_version == compiler.nvrtc_version()
    res = cubin.resource("tiny_add")
    assert res.registers > 0
    assert (res.spill_stores, res.spill_loads) == (0, 0)
    assert 0 < cubin.extra["compile_seconds"] < 60
    assert not cubin.from_cache


def test_target_override(plans):
    cubin = compiler.compile_source(make_source(plans, TINY, ("tiny_add",)), target="sm_86")
    assert cubin.target == "sm_86"
    assert "--gpu-architecture=sm_86" in cubin.options


def test_static_shared_memory_is_reported(plans):
    cubin = compiler.compile_source(make_source(plans, STATIC_SMEM, ("reverse_tile",)))
    res = cubin.resource("reverse_tile")
    assert res.smem_bytes == 4096
    assert res.registers > 0


def test_forced_spills_are_reported(plans):
    cubin = compiler.compile_source(make_source(plans, FORCED_SPILL, ("spill_heavy",)))
    res = cubin.resource("spill_heavy")
    assert res.spill_stores > 0
    assert res.spill_loads > 0
    assert res.registers <= 32


def test_mangled_entry_is_mapped(plans):
    code = "__global__ void plain(float* x) { x[threadIdx.x] = 1.f; }\n"
    cubin = compiler.compile_source(make_source(plans, code, ("plain",)))
    assert cubin.extra["lowered_names"] == {"plain": "_Z5plainPf"}


def test_missing_entry_point_raises(plans):
    with pytest.raises(CompileError, match="entry point 'nope'"):
        compiler.compile_source(make_source(plans, TINY, ("nope",)))


# ---- failures and their repro ------------------------------------------------------------------
def test_syntax_error_raises_compile_error(plans, tmp_path):
    source = make_source(plans, SYNTAX_ERROR, ("broken",))
    with pytest.raises(CompileError) as info:
        compiler.compile_source(source, target="sm_90a")
    err = info.value
    assert "undefined_thing" in err.log and "undefined_thing" in str(err)
    saved = Path(err.source_path)
    assert saved.is_file() and saved.read_text() == SYNTAX_ERROR
    assert saved.parent == tmp_path / "cache" / "failed"
    assert err.repro and "-m attngen.toolchain.compiler" in err.repro and "--arch sm_90a" in err.repro
    assert str(saved) in str(err) and err.repro in str(err)


def test_repro_command_reproduces_the_error(plans):
    with pytest.raises(CompileError) as info:
        compiler.compile_source(make_source(plans, SYNTAX_ERROR, ("broken",)))
    env = child_environment()
    run = subprocess.run(shlex.split(info.value.repro), cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode != 0
    assert "undefined_thing" in run.stderr


def test_command_line_prints_the_report(tmp_path, capsys):
    path = tmp_path / "smem.cu"
    path.write_text(STATIC_SMEM)
    out = tmp_path / "smem.cubin"
    assert compiler.main([str(path), "--arch", "sm_80", "--option=-DUNUSED=1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "reverse_tile" in printed and "4096" in printed and "-DUNUSED=1" in printed
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_command_line_missing_file(tmp_path, capsys):
    assert compiler.main([str(tmp_path / "absent.cu"), "--arch", "sm_80"]) == 1
    assert "error" in capsys.readouterr().err


def test_report_survives_recompiling_one_name(plans):
    source = make_source(plans, STATIC_SMEM, ("reverse_tile",))
    first, second = compiler.compile_source(source), compiler.compile_source(source)
    assert first.resources == second.resources and second.resource("reverse_tile").smem_bytes == 4096
    assert first.data == second.data


def test_missing_report_is_recompiled_under_a_fresh_name(monkeypatch):
    calls: list[str] = []

    def fake(code, filename, options):
        calls.append(filename)
        log = "" if len(calls) == 1 else LOG_SM90A
        return compiler.NvrtcOutput(True, b"cubin-%d" % len(calls), log)

    monkeypatch.setattr(compiler, "run_nvrtc", fake)
    out, _ = compiler.compile_code("code", "k.cu", "sm_90a")
    assert calls[0] == "k.cu" and calls[1] != "k.cu" and calls[1].endswith(".cu")
    assert out.cubin == b"cubin-1"
    assert compiler.parse_ptxas_report(out.log)[0].name == "smem"
