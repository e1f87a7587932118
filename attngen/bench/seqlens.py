"""The per-entry length suites' settings and arithmetic: `attngen bench --decode` (attention over a KV cache)
and `attngen bench --varlen` (a packed training step). Pure Python: options, the points each suite runs, the
bytes and FLOPs they are rated by, the document lengths, and the ATTNGEN_TRUST_SEQLENS switch of timed calls.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..planning.planner_decode import PAGE_SIZES, PAGE_SIZES_TEXT
from .model import ELEM_BYTES, parse_ints, parse_seqlen

DECODE_PREFIX, VARLEN_PREFIX = "attngen-bench-decode", "attngen-bench-varlen"
DECODE_BATCHES: tuple[int, ...] = (1, 8, 32, 64)
DECODE_CACHES: tuple[int, ...] = (1024, 4096, 32768, 131072)
DECODE_PEERS: tuple[str, ...] = ("flash", "cudnn", "fa4")
VARLEN_PEERS: tuple[str, ...] = ("flash", "fa4")
#: Rows per page of the paged cache.
PAGE_SIZE = 256
MAX_SEQLEN_Q = 16
#: The dense step of the varlen suite: batch = total tokens / DENSE_SEQLEN sequences of this length.
DENSE_SEQLEN = 8192
#: FLOPs of forward + backward as a multiple of the forward's.
FWDBWD = 3.5
#: The variable attngen reads (owned by attngen.env); the suites set it to "1" around timed calls only.
TRUST_SEQLENS = "ATTNGEN_TRUST_SEQLENS"
TRUST_NOTE = (f"{TRUST_SEQLENS}=1 for the timed attngen calls (no host check of the lengths, no sync per call); "
              "the checked calls before them ran with the check")
DECODE_CHECK_NOTE = ("attngen's decode calls run with its defaults: the decode kernels check the lengths and the "
                     "block table themselves (no host check, no sync per call)")
GQA_NOTE = ("torch SDPA's FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION read K/V repeated to the query "
            "heads where the backend takes no GQA (reads_repeated_kv: true); GB/s counts the cache's own K+V bytes "
            "for every implementation")
MASK_NOTE = ("every query row attends to its entry's whole cache (mask none; equal to a causal one at seqlen_q 1); "
             "every entry's cache is full (cache_seqlens = cache length)")


@dataclass(frozen=True)
class DecodeOptions:
    head_dims: tuple[int, ...] = (128,)
    heads: int = 32
    kv_heads: int = 8
    seqlen_q: int = 1
    batches: tuple[int, ...] = DECODE_BATCHES
    caches: tuple[int, ...] = DECODE_CACHES
    page_size: int = PAGE_SIZE
    memory_gib: float = 40.0
    dtype: str = "bf16"
    peers: tuple[str, ...] = DECODE_PEERS
    out: Path | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.seqlen_q <= MAX_SEQLEN_Q:
            raise ValueError(f"--seqlen-q must be 1..{MAX_SEQLEN_Q}, got {self.seqlen_q}")
        if self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise ValueError(f"--heads ({self.heads}) must be a multiple of --kv-heads ({self.kv_heads})")
        if self.page_size not in PAGE_SIZES:
            raise ValueError(f"--page-size must be {PAGE_SIZES_TEXT}, got {self.page_size}")
        bad = [c for c in self.caches if c % self.page_size]
        if bad:
            raise ValueError(f"cache lengths must be multiples of the page size {self.page_size}; got {bad}")

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


@dataclass(frozen=True)
class DecodePoint:
    head_dim: int
    batch: int
    cache: int

    @property
    def label(self) -> str:
        return f"hd{self.head_dim} b{self.batch} cache {_k(self.cache)}"


@dataclass(frozen=True)
class VarlenOptions:
    head_dims: tuple[int, ...] = (128,)
    heads: int = 16
    total_tokens: int = 32768
    min_len: int = 64
    max_len: int = 8192
    seed: int = 0
    dtype: str = "bf16"
    peers: tuple[str, ...] = VARLEN_PEERS
    out: Path | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"document lengths must satisfy 1 <= min <= max, got {self.min_len}..{self.max_len}")
        if self.total_tokens < max(self.min_len, DENSE_SEQLEN) or self.total_tokens % DENSE_SEQLEN:
            raise ValueError(f"--total-tokens must be a positive multiple of {DENSE_SEQLEN} (the dense step's "
                             f"seqlen), got {self.total_tokens}")


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


# ---- parsing ------------------------------------------------------------------------------------------------


def parse_lengths(text: str) -> tuple[int, ...]:
    """'1,8,32' or '1k,128k' -> ints (k = 1024), positive, in order, without repeats."""
    return parse_ints(text, parse_seqlen)


def parse_range(text: str) -> tuple[int, int]:
    """'64..8k' -> (64, 8192)."""
    lo, sep, hi = text.partition("..")
    if not sep:
        raise ValueError(f"expected MIN..MAX (e.g. 64..8k), got {text!r}")
    return parse_seqlen(lo), parse_seqlen(hi)


def decode_options(opts: dict[str, Any]) -> DecodeOptions:
    """DecodeOptions from the command's options (names as its parameters); ValueError names the option."""
    return DecodeOptions(
        head_dims=_opt("--head-dims", parse_ints, _get(opts, "head_dims", "128")),
        heads=_get(opts, "heads", 32), kv_heads=opts.get("kv_heads", 8), seqlen_q=opts.get("seqlen_q", 1),
        page_size=opts.get("page_size", PAGE_SIZE),
        batches=_opt("--batches", parse_ints, _get(opts, "batches", "1,8,32,64")),
        caches=_opt("--caches", parse_lengths, _get(opts, "caches", "1k,4k,32k,128k")),
        memory_gib=float(opts.get("memory_gib", 40.0)), dtype=_get(opts, "dtype", "bf16"),
        peers=_opt("--peers", lambda t: parse_peer_list(t, DECODE_PEERS), _get(opts, "peers", ",".join(DECODE_PEERS))),
        out=opts.get("out"))


def varlen_options(opts: dict[str, Any]) -> VarlenOptions:
    """VarlenOptions from the command's options (names as its parameters); ValueError names the option."""
    lo, hi = _opt("--doc-lengths", parse_range, _get(opts, "doc_lengths", "64..8k"))
    return VarlenOptions(
        head_dims=_opt("--head-dims", parse_ints, _get(opts, "head_dims", "128")), heads=_get(opts, "heads", 16),
        total_tokens=opts.get("total_tokens", 32768), min_len=lo, max_len=hi, seed=opts.get("seed", 0),
        dtype=_get(opts, "dtype", "bf16"),
        peers=_opt("--peers", lambda t: parse_peer_list(t, VARLEN_PEERS), _get(opts, "peers", ",".join(VARLEN_PEERS))),
        out=opts.get("out"))


def _get(opts: dict[str, Any], key: str, default: Any) -> Any:
    """opts[key] unless absent or None (an empty text stays, and fails its parse)."""
    value = opts.get(key)
    return default if value is None else value


def _opt(name: str, parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def parse_peer_list(text: str, known: Sequence[str]) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    unknown = [n for n in names if n not in known and n != "none"]
    if unknown:
        raise ValueError(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(known)} (or none)")
    return tuple(n for n in names if n != "none")


# ---- decode: points and bytes -------------------------------------------------------------------------------


def kv_bytes(batch: int, cache: int, kv_heads: int, head_dim: int, elem: int = ELEM_BYTES) -> int:
    """The K and V bytes one decode step reads: the whole cache of every entry."""
    return 2 * batch * cache * kv_heads * head_dim * elem


def footprint_bytes(point: DecodePoint, options: DecodeOptions) -> int:
    """Device memory of a point at most: the cache, plus the copy repeated to the query heads for peers
    without GQA (group x the cache)."""
    return kv_bytes(point.batch, point.cache, options.kv_heads, point.head_dim) * (1 + options.group)


def decode_points(options: DecodeOptions) -> tuple[list[DecodePoint], list[dict[str, Any]]]:
    """(points to run, skipped points with why): every head dim x batch x cache whose footprint fits
    options.memory_gib; caches ascending within each batch."""
    run, skipped = [], []
    limit = options.memory_gib * 2**30
    for d in options.head_dims:
        for b in options.batches:
            for c in sorted(options.caches):
                point = DecodePoint(d, b, c)
                need = footprint_bytes(point, options)
                if need > limit:
                    skipped.append({"head_dim": d, "batch": b, "cache": c, "reason": f"needs {need / 2**30:.1f} "
                                    f"GiB (cache + repeated K/V) over --memory-gib {options.memory_gib:g}"})
                else:
                    run.append(point)
    return run, skipped


def gbps(nbytes: float, ms: float | None) -> float | None:
    return nbytes / (ms * 1e-3) / 1e9 if ms else None


def decode_ratios(times: dict[str, float | None], peers: Sequence[str]) -> dict[str, Any]:
    """From {impl: ms}: the best peer, best peer ms / attngen ms (> 1: attngen faster) and paged / contiguous."""
    found = {p: times[p] for p in peers if times.get(p)}
    best = min(found, key=lambda p: found[p] or math.inf) if found else None
    ours, paged = times.get("attngen"), times.get("attngen_paged")
    return {"best_peer": best,
            "best_peer_over_attngen": (found[best] or 0) / ours if best and ours else None,
            "paged_over_contiguous": paged / ours if paged and ours else None}


# ---- varlen: documents and FLOPs ----------------------------------------------------------------------------


def doc_lengths(total: int, lo: int, hi: int, seed: int) -> list[int]:
    """Document lengths, log-uniform in [lo, hi], summing to `total`: drawn until the sum reaches it, the last
    cut to fit; a cut below `lo` is topped up to `lo` from the first document that can spare it (or joins the one
    before it). Deterministic in `seed`."""
    rng = random.Random(seed)
    out: list[int] = []
    while sum(out) < total:
        out.append(min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))))
    out[-1] -= sum(out) - total
    deficit = lo - out[-1]
    if deficit > 0 and len(out) > 1:
        donor = next((j for j in range(len(out) - 1) if out[j] - deficit >= lo), None)
        if donor is not None:
            out[donor] -= deficit
            out[-1] = lo
        else:
            out[-2] += out.pop()
    return out


def causal_flops(lengths: Sequence[int], head_dim: int, heads: int, passes: float = FWDBWD) -> float:
    """4 * n^2 * d * h / 2 per document (causal), times `passes` (forward + backward: 3.5)."""
    return sum(4.0 * n * n * head_dim * heads / 2 for n in lengths) * passes


def dense_batch(total: int) -> int:
    return max(1, total // DENSE_SEQLEN)


def tflops(flops: float, ms: float | None) -> float | None:
    return flops / (ms * 1e-3) / 1e12 if ms else None


def varlen_ratios(rates: dict[str, float | None]) -> dict[str, float | None]:
    """TFLOP/s ratios: attngen varlen / attngen dense, and attngen varlen / each peer (> 1: attngen faster)."""
    ours = rates.get("attngen_varlen")

    def over(other: str) -> float | None:
        theirs = rates.get(other)
        return ours / theirs if ours and theirs else None

    return {"varlen_over_dense": over("attngen_dense"),
            **{f"attngen_over_{p}": over(p) for p in rates if p not in ("attngen_varlen", "attngen_dense")}}


@contextlib.contextmanager
def trusted_seqlens() -> Iterator[None]:
    """ATTNGEN_TRUST_SEQLENS=1 inside (the timed calls), the previous value after."""
    old = os.environ.get(TRUST_SEQLENS)
    os.environ[TRUST_SEQLENS] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(TRUST_SEQLENS, None)
        else:
            os.environ[TRUST_SEQLENS] = old
