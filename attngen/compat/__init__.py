"""Drop-in replacements for other attention libraries' functions, running attngen's kernels.

`attngen.compat.flash_attn` has flash_attn 2.x's `flash_attn_func`, `flash_attn_varlen_func` and
`flash_attn_with_kvcache` (also `attngen.flash_attn_func` and so on). Importing this package loads neither torch
nor a kernel: each function builds the spec its options need on first use.
"""

from __future__ import annotations

from .flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"]
