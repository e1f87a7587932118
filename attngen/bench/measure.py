"""What touches the GPU apart from the implementations: inputs, the float64 reference, timing, ceilings.

Timing is `triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")` in ms; it
clears the L2 cache before every run. Without triton: the median of CUDA events over 50 runs
after a warm-up, clearing L2 the same way.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .model import Config

if TYPE_CHECKING:
    import torch

#: The reference slice: batch element 0, the first REF_HEADS heads, every query row.
REF_HEADS = 2
#: float64 scores of one reference chunk are at most this many bytes.
REF_CHUNK_BYTES = 1 << 29
WARMUP_MS, REP_MS = 25, 100
EVENT_WARMUP, EVENT_RUNS = 10, 50
MATMUL_N = 8192
COPY_BYTES = 1 << 30


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def make_inputs(cfg: Config, dtype: str, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh standard-normal q, k, v of shape (batch, seqlen, heads, head_dim) on the current GPU."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (cfg.batch, cfg.seqlen, cfg.heads, cfg.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch_dtype(dtype), generator=gen) for _ in range(3))
    return q, k, v


def reference_slice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    heads: int = REF_HEADS) -> torch.Tensor:
    """float64 attention of batch element 0 and the first `heads` heads: (seqlen, heads, head_dim)."""
    import torch

    seqlen, d = q.shape[1], q.shape[3]
    q64, k64, v64 = (t[0, :, :heads].double().transpose(0, 1) for t in (q, k, v))  # (h, s, d)
    out = torch.empty_like(q64)
    rows = max(1, REF_CHUNK_BYTES // (8 * q64.shape[0] * seqlen))
    cols = torch.arange(seqlen, device=q.device)
    for start in range(0, seqlen, rows):
        stop = min(seqlen, start + rows)
        scores = (q64[:, start:stop] @ k64.transpose(1, 2)) / math.sqrt(d)
        if causal:
            hidden = cols[None, :] > torch.arange(start, stop, device=q.device)[:, None]
            scores.masked_fill_(hidden, -math.inf)
        out[:, start:stop] = torch.softmax(scores, dim=-1) @ v64
        del scores
    return out.transpose(0, 1)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when out has a NaN or inf."""
    got = out.double()
    if not bool(got.isfinite().all()):
        return math.inf
    return float((got - ref).norm() / ref.norm())


def timer_name() -> str:
    try:
        import triton.testing  # noqa: F401
    except ImportError:
        return "cuda-events"
    return "triton.testing.do_bench"


def time_ms(fn: Callable[[], Any]) -> float:
    """Median time of fn() in ms (do_bench, else CUDA events)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        return _events_median_ms(fn)
    return float(do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median"))


def host_us_per_call(fn: Callable[[], Any], calls: int, warmup: int = 10) -> float:
    """Wall microseconds per call of a loop of `calls` calls of fn() that never waits for the GPU (synchronized
    before and after): the host's pace where its calls take longer than their kernels."""
    import time

    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_ms(fn: Callable[[], Any]) -> float:
    """Median time of fn() captured once in a CUDA graph and replayed (time_ms of the replay): the GPU's time
    without the host's launch cost, as a serving loop that captures its decode step sees it."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_ms(graph.replay)


def kernel_times_us(fn: Callable[[], Any], steps: int, name_chars: int = 70, warmup: int = 3) -> dict[str, float]:
    """Mean device microseconds per call of fn() of every kernel it launches (torch.profiler's CUDA activity over
    `steps` calls after `warmup` calls), by kernel name cut to `name_chars` characters."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            totals[e.name[:name_chars]] += e.device_time / steps
    return dict(totals)


def kernel_span_us(fn: Callable[[], Any]) -> float:
    """Device microseconds from the start of the first kernel one call of fn() launches to the end of its last
    (torch.profiler's CUDA activity): what kernel_times_us's sum overstates where a call's kernels overlap (a
    programmatic dependent that starts under its predecessor's last wave)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    spans = [e.time_range for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not spans:
        raise RuntimeError("kernel_span_us: the call launched no kernel the profiler saw")
    return max(s.end for s in spans) - min(s.start for s in spans)


def _events_median_ms(fn: Callable[[], Any]) -> float:
    import torch

    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(EVENT_WARMUP):
        fn()
    times = []
    for _ in range(EVENT_RUNS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def ceilings(dtype: str) -> dict[str, Any]:
    """A MATMUL_N^3 matmul rate and a device-to-device copy bandwidth (bytes read + written)."""
    import torch

    mm_ms = _matmul_ms(dtype)
    copy_ms = _copy_ms()
    torch.cuda.empty_cache()
    return {"matmul_n": MATMUL_N, "matmul_dtype": dtype, "matmul_ms": mm_ms,
            "matmul_tflops": 2.0 * MATMUL_N**3 / (mm_ms * 1e-3) / 1e12,
            "copy_bytes": COPY_BYTES, "copy_ms": copy_ms, "copy_gbps": 2.0 * COPY_BYTES / (copy_ms * 1e-3) / 1e9}


def _matmul_ms(dtype: str) -> float:
    import torch

    a, b = (torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch_dtype(dtype)) for _ in range(2))
    return time_ms(lambda: torch.matmul(a, b))


def _copy_ms() -> float:
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 256)
    dst = torch.empty_like(src)
    return time_ms(lambda: dst.copy_(src))


def environment() -> dict[str, Any]:
    """GPU, driver, library versions, date: what a result needs beside it to be read later."""
    import torch

    from .. import __version__

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": _version_of("triton"),
        "attngen": __version__,
        "nvrtc": _nvrtc_version(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    env.update(_nvidia_smi())
    return env


def _version_of(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except Exception:  # absent or broken: the report says so
        return None


def _nvrtc_version() -> str | None:
    try:
        from ..toolchain.compiler import nvrtc_version

        return nvrtc_version()
    except Exception as exc:  # the attngen rows then fail with the same cause
        return f"unavailable ({type(exc).__name__}: {exc})"


def _nvidia_smi() -> dict[str, Any]:
    fields = ("driver_version", "clocks.sm", "clocks.max.sm", "power.limit", "temperature.gpu")
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                               "-i", str(_physical_index())], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {"driver": None}
    values = [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")] if done.stdout.strip() else []
    if done.returncode != 0 or len(values) != len(fields):
        return {"driver": None}
    names = ("driver", "sm_clock_mhz", "max_sm_clock_mhz", "power_limit_w", "temperature_c")
    return dict(zip(names, values, strict=True))


def _physical_index() -> int:
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    index = torch.cuda.current_device()
    return int(ids[index]) if index < len(ids) and ids[index].isdigit() else index


def copy_bandwidth() -> dict[str, Any]:
    """A COPY_BYTES device-to-device copy: its time and GB/s (bytes read + written)."""
    import torch

    copy_ms = _copy_ms()
    torch.cuda.empty_cache()
    return {"copy_bytes": COPY_BYTES, "copy_ms": copy_ms, "copy_gbps": 2.0 * COPY_BYTES / (copy_ms * 1e-3) / 1e9}
