"""attngen: a compiler from declarative attention specs to exact FlashAttention-class CUDA kernels.

    spec.yaml --load--> AttentionSpec --plan--> KernelPlan --render--> KernelSource
              --compile--> Cubin --load--> AttentionKernel (a torch.library op)

Every public name loads its module on first use: `import attngen` loads neither pydantic, jinja2,
torch nor the CUDA driver.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "AttentionSpec": "attngen.spec.model",
    "Arch": "attngen.spec.model",
    "DType": "attngen.spec.model",
    "MaskKind": "attngen.spec.model",
    "KernelPlan": "attngen.planning.ir",
    "plan": "attngen.planning.planner",
    "explain": "attngen.planning.explain",
    "Explanation": "attngen.planning.explain",
    "load_spec": "attngen.spec.loader",
    "compile": "attngen.runtime.kernel",
    "AttentionKernel": "attngen.runtime.kernel",
    "build": "attngen.toolchain.builder",
    "render": "attngen.codegen.renderer",
    "AttngenError": "attngen.errors",
    "SpecError": "attngen.errors",
    "PlanError": "attngen.errors",
    "CompileError": "attngen.errors",
    "LaunchError": "attngen.errors",
    "DeviceCheckError": "attngen.errors",
    "check_device_errors": "attngen.runtime.device_checks",
    "flash_attn_func": "attngen.compat.flash_attn",
    "flash_attn_varlen_func": "attngen.compat.flash_attn",
    "flash_attn_with_kvcache": "attngen.compat.flash_attn",
}
#: Subpackages that are public names themselves (`attngen.reference(spec, q, k, v)` is callable).
_PACKAGES = {"reference": "attngen.reference"}

__all__ = sorted({*_LAZY, *_PACKAGES}) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _PACKAGES:
        return import_module(_PACKAGES[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attngen' has no attribute '{name}'")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_PACKAGES})
