"""attngen as a Hugging Face Transformers attention backend: `register()`, then
`AutoModelForCausalLM.from_pretrained(..., attn_implementation="attngen")` (or `model.set_attn_implementation`).

Every attention layer then runs through attngen. Each layer's configuration maps to a spec through the same
options as the flash_attn-compatible functions (`attngen.compat.options`): GQA (kv heads), `scaling`, causal
(`module.is_causal`), `sliding_window` (a window of that many positions, the query included), softcap (Gemma 2's
`attn_logit_softcapping`) and sinks (gpt-oss's `s_aux`, passed as the kernel's fp32 `sinks`); each distinct
spec compiles once per process. Like flash_attention_2, the backend takes no dense mask: "attngen" is also
registered with Transformers' mask functions as flash-style (None, or the 2D padding mask), so

- a batch without padding is one dense call (causal and windows aligned bottom-right, which is also what a
  KV cache needs: the new queries are the last rows of the keys);
- a padded batch is unpadded into packed sequences, one varlen call, and padded back (padding rows give 0);
- a padding-free packed batch (batch 1, position_ids restarting at their minimum, or cu_seq_lens_* given) is
  one varlen call.

Transformers is not a dependency of attngen: this module imports it only inside `register()`.
"""

from __future__ import annotations

import re
from typing import Any

from ..compat.arguments import dtype_name
from ..compat.kernels import kernel_for
from ..compat.options import KernelOptions, make_options
from . import batches

#: The name models select: attn_implementation="attngen".
NAME = "attngen"
#: The oldest Transformers whose attention and mask registries this backend is written against.
MIN_VERSION = (5, 0)
_MIN = ".".join(map(str, MIN_VERSION))


def register() -> None:
    """Add "attngen" to Transformers' attention functions and (flash-style, no dense mask) mask functions.
    Idempotent. ImportError if Transformers is missing or older than 5.0."""
    attention, masks, flash_mask = _registries()
    attention.register(NAME, attention_forward)
    masks.register(NAME, flash_mask)


def _registries() -> tuple[Any, Any, Any]:
    try:
        import transformers
    except ImportError as exc:
        raise ImportError(f"attngen.integrations.transformers.register() needs Hugging Face Transformers >= {_MIN} "
                          f"(pip install transformers); it is not installed") from exc
    if version_tuple(transformers.__version__) < MIN_VERSION:
        raise ImportError(f"attngen's Transformers backend needs transformers >= {_MIN}, "
                          f"found {transformers.__version__}; upgrade it (pip install -U transformers)")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    return AttentionInterface, AttentionMaskInterface, flash_attention_mask


def version_tuple(version: str) -> tuple[int, ...]:
    """(5, 17) of '5.17.0.dev0'."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


def attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                      scaling: float | None = None, sliding_window: int | None = None, softcap: float | None = None,
                      is_causal: bool | None = None, s_aux: Any = None, **kwargs: Any) -> tuple[Any, None]:
    """One attention layer: query (batch, heads, seqlen_q, head_dim), key and value (batch, kv_heads, seqlen_k,
    head_dim) as Transformers passes them; returns (out (batch, seqlen_q, heads, head_dim), None)."""
    if dropout:
        raise ValueError(f"dropout must be 0.0: attngen's kernels have no attention dropout, got {dropout} "
                         f"(set the config's attention_dropout to 0.0 to train with attngen)")
    q, k, v = (t.transpose(1, 2) for t in _kernel_dtype(query, key, value))
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(f"attngen needs one head dim for queries and values, got {q.shape[-1]} and {v.shape[-1]}")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    options = layer_options(q.shape[-1], dtype_name(q), causal=bool(causal), sliding_window=sliding_window,
                            softcap=softcap, sinks=s_aux is not None, deterministic=kwargs.get("deterministic"))
    kernel = kernel_for(options, q.device)
    call: dict[str, Any] = {"softmax_scale": scaling}
    if s_aux is not None:
        call["sinks"] = s_aux.float()
    if attention_mask is not None:
        return batches.padded_call(kernel, q, k, v, attention_mask, **call), None
    packed = batches.packed_from(kwargs, q, k)
    if packed is not None:
        out = kernel(*(t[0].contiguous() for t in (q, k, v)), **packed.kwargs(), **call)
        return out[None], None
    return kernel(q, k, v, **call), None


def layer_options(head_dim: int, dtype: str, *, causal: bool, sliding_window: int | None = None,
                  softcap: float | None = None, sinks: bool = False,
                  deterministic: bool | None = None) -> KernelOptions:
    """A layer's kernel options: Transformers' `sliding_window` w is a window of w positions, the query
    included (left w - 1; right 0 when causal, else w - 1, as its flash path has it)."""
    window = (-1, -1)
    if sliding_window:
        window = (sliding_window - 1, sliding_window - 1)
    return make_options(head_dim=head_dim, dtype=dtype, causal=causal, window_size=window, softcap=softcap or 0.0,
                        sinks=sinks, deterministic=bool(deterministic))


def _kernel_dtype(*tensors: Any) -> tuple[Any, ...]:
    """float32 activations under autocast run in the autocast dtype (attngen's kernels take fp16 and bf16); any
    other float32 call reaches spec_for, which refuses it by name."""
    import torch

    device = tensors[0].device.type
    if tensors[0].dtype == torch.float32 and torch.is_autocast_enabled(device):
        target = torch.get_autocast_dtype(device)
        return tuple(t.to(target) for t in tensors)
    return tensors
