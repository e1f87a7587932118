"""Every environment variable attngen reads, in one place.

ATTNGEN_CACHE_DIR   where compiled kernels are cached (default: $XDG_CACHE_HOME/attngen or ~/.cache/attngen)
ATTNGEN_POISON      "1" fills op outputs with NaN before each launch (tests: unwritten outputs show)
ATTNGEN_TRUST_SEQLENS  "1" skips the host-side check of packed (varlen) lengths and of the lengths of KV-cache
                    calls that run the forward kernels or append keys (no sync per call)
ATTNGEN_HOST_CHECKS "1" makes KV-cache decode calls check their lengths and block table on the host too (a sync
                    per call, an error at the call itself); by default their kernels check them
                    (runtime.device_checks)
ATTNGEN_TEMPLATES   render from this folder of templates instead of the shipped one (A/B runs of a template
                    change); its files enter every cache key through the generator hash
"""

from __future__ import annotations

import os
from pathlib import Path

#: Variables whose value changes what a build produces; they enter the cache key.
KEY_VARIABLES: tuple[str, ...] = ()


def cache_dir() -> Path:
    explicit = os.environ.get("ATTNGEN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attngen"


def key_environment() -> dict[str, str]:
    """The environment that changes build output (part of every cache key)."""
    return {name: os.environ.get(name, "") for name in KEY_VARIABLES}


def poison_outputs() -> bool:
    return os.environ.get("ATTNGEN_POISON", "") == "1"


def host_checks() -> bool:
    """Whether KV-cache decode calls also check their lengths and table on the host (ATTNGEN_HOST_CHECKS=1)."""
    return os.environ.get("ATTNGEN_HOST_CHECKS", "") == "1"


def templates_override() -> Path | None:
    """The folder ATTNGEN_TEMPLATES names, if any (read when the first kernel renders)."""
    explicit = os.environ.get("ATTNGEN_TEMPLATES")
    return Path(explicit).expanduser() if explicit else None


def check_seqlens() -> bool:
    """Whether calls check packed lengths and cache lengths on the host (one small copy and a sync per call);
    ATTNGEN_TRUST_SEQLENS=1 skips it (the lengths must then be right: a wrong end reads out of bounds)."""
    return os.environ.get("ATTNGEN_TRUST_SEQLENS", "") != "1"
