"""attngen: a compiler from declarative attention specs to exact FlashAttention-class CUDA kernels.

    spec.yaml --load--> AttentionSpec --plan--> KernelPlan --render--> KernelSource
              --compile--> Cubin --load--> AttentionKernel (a torch.library op)

Heavy modules (torch, the CUDA driver) load on first use, never at import.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# `build` and `render` are both submodules and functions: bind the functions now, or the first
# import of the submodule would shadow them. Both modules import nothing heavy at top level.
from .build import build as build  # noqa: E402
from .render import render as render  # noqa: E402

_LAZY = {
    "AttentionSpec": "attngen.spec",
    "Arch": "attngen.spec",
    "DType": "attngen.spec",
    "MaskKind": "attngen.spec",
    "KernelPlan": "attngen.ir",
    "plan": "attngen.planner",
    "load_spec": "attngen.loader",
    "compile": "attngen.kernel",
    "AttentionKernel": "attngen.kernel",
    "AttngenError": "attngen.errors",
    "SpecError": "attngen.errors",
    "PlanError": "attngen.errors",
    "CompileError": "attngen.errors",
    "LaunchError": "attngen.errors",
}

__all__ = sorted([*_LAZY, "build", "render"]) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attngen' has no attribute '{name}'")
    return getattr(import_module(module), name)
