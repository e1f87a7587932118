"""A call's runtime tensors and scalars (the spec's declared ones, and sinks): validated like q, k and v,
prepared for the kernels (contiguous, with the min/max summaries the tile classifier reads), and written
into the parameter block's `var_*` fields."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..codegen.abi import Field
from ..features.score_mod import ALIBI_SLOPES, alibi_slopes
from ..features.variant import SUMMARY_BLOCK, RuntimeArg, Variant
from ..features.variant_cxx import indexes_entries
from ..spec.variant import TensorDecl

if TYPE_CHECKING:
    import torch

_TORCH_DTYPES = {"int32": "int32", "fp32": "float32"}


@dataclass(frozen=True)
class KernelVariant:
    """What a compiled kernel needs of its spec's variant at every call, derived once (parsing the expressions
    is never on a launch's path): the runtime arguments and the parameter-block fields they fill."""

    arguments: tuple[RuntimeArg, ...]
    fields: tuple[Field, ...]
    #: A tensor of the variant is indexed by the batch entry (variant_cxx.indexes_entries): its kernels keep the
    #: 3-D grid's entry order.
    indexes_entries: bool = False

    @classmethod
    def of(cls, variant: Variant) -> KernelVariant:
        return cls(variant.arguments(), variant.param_fields(), indexes_entries(variant))


@dataclass
class VariantArgs:
    """The prepared arguments of one call, and the parameter-block fields (`fields`, appended to a family's
    own with abi.with_variant) they are written into."""

    fields: tuple[Field, ...]
    tensors: dict[str, Any] = field(default_factory=dict)
    scalars: dict[str, float | int] = field(default_factory=dict)
    summaries: dict[str, Any] = field(default_factory=dict)
    batch: int = 0
    #: A descaled (fp8) call's (3, batch, kv_heads) fp32 descale planes (runtime.descale), else None.
    descale: Any = None
    #: KernelVariant.indexes_entries of the kernel the call runs.
    indexes_entries: bool = False

    def fill(self, params: Any) -> None:
        """Write the `var_*` fields of a parameter block whose struct has them (and the descale planes)."""
        if self.descale is not None:
            params.descale = self.descale.data_ptr()
            params.descale_stride = self.descale.stride(0)
        if hasattr(params, "var_batch"):
            params.var_batch = self.batch
        for name, t in self.tensors.items():
            setattr(params, f"var_{name}", t.data_ptr())
        for name, s in self.summaries.items():
            setattr(params, f"var_{name}_blk", s.data_ptr())
        for name, value in self.scalars.items():
            setattr(params, f"var_{name}", value)



def expected_shape(decl: TensorDecl, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else sizes[d] for d in decl.shape)


def sizes_of(q: Any, k: Any) -> dict[str, int]:
    """The named sizes of a dense call (a packed call's come from its Seqlens: `Seqlens.sizes`)."""
    return {"batch": q.shape[0], "heads": q.shape[2], "kv_heads": k.shape[2], "seqlen_q": q.shape[1],
            "seqlen_k": k.shape[1]}


def check_kwargs(arguments: tuple[RuntimeArg, ...], kwargs: Mapping[str, Any], spec_name: str) -> None:
    """Every keyword argument is one the spec declares, and every declared one is given."""
    wanted = [a for a in arguments if not a.computed]
    names = {a.name for a in wanted}
    for name in kwargs:
        if name not in names:
            listing = ", ".join(sorted(names)) or "none"
            raise ValueError(f"unexpected keyword argument '{name}': spec '{spec_name}' declares {listing}")
    for arg in wanted:
        if arg.name not in kwargs:
            raise ValueError(f"missing keyword argument '{arg.name}': spec '{spec_name}' reads "
                             f"{_describe(arg)}; pass it as kernel(q, k, v, {arg.name}=...)")


def _describe(arg: RuntimeArg) -> str:
    if isinstance(arg.decl, TensorDecl):
        return f"a {arg.decl.dtype} tensor of shape [{', '.join(map(str, arg.decl.shape))}]"
    return f"a {arg.decl.dtype} scalar"


def validate(arguments: tuple[RuntimeArg, ...], q: Any, k: Any, kwargs: Mapping[str, Any],
             spec_name: str, sizes: Mapping[str, int] | None = None) -> tuple[list[Any], list[float]]:
    """The call's keyword arguments checked against the spec's `arguments` (the variant's, computed once per
    kernel): (tensors, scalars) in declaration order, the form the custom op carries (attngen computes its
    own tensors, ALiBi's standard slopes, at launch)."""
    check_kwargs(arguments, kwargs, spec_name)
    sizes = sizes_of(q, k) if sizes is None else sizes
    tensors: list[Any] = []
    scalars: list[float] = []
    for arg in arguments:
        if arg.computed:
            continue
        if isinstance(arg.decl, TensorDecl):
            tensors.append(_tensor(arg, kwargs[arg.name], sizes, q.device))
        else:
            scalars.append(float(_scalar(arg, kwargs[arg.name])))
    return tensors, scalars


def prepare(kernel: KernelVariant, q: Any, tensors: list[Any], scalars: list[float], batch: int) -> VariantArgs:
    """The launch's view of validated arguments (q as the launchers see it, `batch` entries): computed tensors
    added, summaries taken."""
    args = VariantArgs(kernel.fields, batch=batch, indexes_entries=kernel.indexes_entries)
    given_tensors, given_scalars = iter(tensors), iter(scalars)
    for arg in kernel.arguments:
        if arg.computed:
            args.tensors[arg.name] = _computed(arg.name, q)
        elif isinstance(arg.decl, TensorDecl):
            args.tensors[arg.name] = next(given_tensors).detach()
        else:
            value = next(given_scalars)
            args.scalars[arg.name] = int(value) if arg.decl.dtype == "int32" else value
        if arg.summarized:
            args.summaries[arg.name] = summarize(args.tensors[arg.name])
    return args


def _tensor(arg: RuntimeArg, t: Any, sizes: Mapping[str, int], device: Any) -> Any:
    import torch

    assert isinstance(arg.decl, TensorDecl)
    want_dtype = getattr(torch, _TORCH_DTYPES[arg.decl.dtype])
    shape = expected_shape(arg.decl, sizes)
    what = f"{arg.name} must be a {want_dtype} tensor of shape {list(shape)} on {device}"
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what}, got {type(t).__name__}")
    if t.device != device:
        raise ValueError(f"{what} (the device of q), got a tensor on {t.device}")
    if t.dtype != want_dtype:
        raise ValueError(f"{what}, got dtype {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{what}, got shape {list(t.shape)}")
    if t.requires_grad and not arg.differentiable and t.is_floating_point():
        raise ValueError(f"{arg.name} requires grad, but attngen computes gradients for q, k, v and sinks only; "
                         f"pass {arg.name}.detach() (its gradient is not computed)")
    # The sinks keep their autograd history (the op returns their gradient); the rest are plain data.
    return t.contiguous() if arg.differentiable else t.detach().contiguous()


def _scalar(arg: RuntimeArg, value: Any) -> float | int:
    if arg.decl.dtype == "int32":
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
            raise ValueError(f"{arg.name} must be an int32 Python int, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{arg.name} must be a finite Python float, got {value!r}")
    return float(value)


def _computed(name: str, q: Any) -> Any:
    assert name == ALIBI_SLOPES, name
    return _standard_slopes(q.shape[2], str(q.device))


@lru_cache(maxsize=64)
def _standard_slopes(heads: int, device: str) -> Any:
    """ALiBi's standard slopes on a device, made once per head count (no copy to the GPU per call)."""
    import torch

    return torch.tensor(alibi_slopes(heads), dtype=torch.float32, device=device)


def summarize(t: torch.Tensor) -> torch.Tensor:
    """Min and max of every SUMMARY_BLOCK entries along the last dim: shape [..., blocks, 2]."""
    import torch

    last = t.shape[-1]
    if last == 0:
        return t.new_empty((*t.shape[:-1], 0, 2))
    blocks = -(-last // SUMMARY_BLOCK)
    pad = blocks * SUMMARY_BLOCK - last
    padded = torch.cat([t, t[..., -1:].expand(*t.shape[:-1], pad)], dim=-1) if pad else t
    tiles = padded.reshape(*t.shape[:-1], blocks, SUMMARY_BLOCK)
    return torch.stack([tiles.amin(-1), tiles.amax(-1)], dim=-1).contiguous()
