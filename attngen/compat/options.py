"""What a flash_attn-style call asks of a kernel, as a frozen value (`KernelOptions`), and the AttentionSpec that
serves it (`spec_for`): a pure function of the options, so one compiled kernel serves every call that agrees
on them.

flash_attn's conventions are folded in here: `causal=True` is a window whose right side is 0; a window of
(-1, -1) masks nothing, (-1, 0) is the causal preset, anything else the sliding-window preset (bottom-right
aligned, -1 unbounded); `softcap > 0` caps the scaled logits (`softcap * tanh(score / softcap)`) before the
ALiBi bias `-slope * |i + sk - sq - j|` is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..spec.model import AttentionSpec

#: torch dtype names the kernels take, and the spec's spelling of each.
SPEC_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}
#: `alibi_slopes` absent, of shape (heads,), or of shape (batch, heads).
AlibiForm = Literal["none", "heads", "batch_heads"]
#: The keyword argument the kernel takes the slopes as: the preset's own name, or the expression's tensor.
PRESET_SLOPES, EXPR_SLOPES = "alibi_slopes", "slopes"
SINKS = "sinks"


@dataclass(frozen=True)
class KernelOptions:
    """Everything about a call that selects a kernel (not the shapes or the scale, which each call passes)."""

    head_dim: int
    #: The torch dtype name of q, k and v ("bfloat16"); spec_for refuses what the kernels do not take.
    dtype: str
    #: (left, right) around the bottom-right diagonal, -1 unbounded; causal folded in (right 0).
    window: tuple[int, int] = (-1, -1)
    #: 0.0: no softcap.
    softcap: float = 0.0
    alibi: AlibiForm = "none"
    #: A learnable per-head sink logit in each row's softmax (gpt-oss); flash_attn 2 has none.
    sinks: bool = False
    #: Bitwise-reproducible gradients (the backward without floating-point atomics).
    deterministic: bool = False

    @property
    def slopes_kwarg(self) -> str | None:
        """The kernel's keyword argument for the ALiBi slopes (None without ALiBi)."""
        if self.alibi == "none":
            return None
        return PRESET_SLOPES if self.alibi == "heads" and self.softcap == 0.0 else EXPR_SLOPES

    @property
    def causal(self) -> bool:
        """The causal preset exactly: (-1, 0)."""
        return self.window == (-1, 0)


def make_options(*, head_dim: int, dtype: str, causal: bool = False, window_size: Any = (-1, -1),
                 softcap: float = 0.0, alibi: AlibiForm = "none", sinks: bool = False,
                 deterministic: bool = False) -> KernelOptions:
    """Validated, normalized options from flash_attn's arguments (`window_size`, `causal`, `softcap`)."""
    left, right = check_window(window_size)
    if causal:
        right = 0
    return KernelOptions(head_dim=int(head_dim), dtype=dtype, window=(left, right), softcap=check_softcap(softcap),
                         alibi=alibi, sinks=bool(sinks), deterministic=bool(deterministic))


def check_window(window_size: Any) -> tuple[int, int]:
    """`window_size` as (left, right): two ints, each >= 0 or -1 for unbounded."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be a pair (left, right) of ints, each >= 0 or -1 for unbounded; "
                         f"got {window_size!r}") from None
    for side in (left, right):
        if isinstance(side, bool) or not isinstance(side, int) or side < -1:
            raise ValueError(f"window_size must be a pair (left, right) of ints, each >= 0 or -1 for unbounded; "
                             f"got {tuple(window_size)!r}")
    return left, right


def check_softcap(softcap: Any) -> float:
    """`softcap` as a float: 0.0 (off) or a positive finite number."""
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap must be 0.0 (off) or a positive finite float, got {softcap!r}")
    return float(softcap)


def spec_for(options: KernelOptions) -> AttentionSpec:
    """The AttentionSpec of `options`: the mask and score-mod presets where they exist, an expression of the
    variant language where they do not (softcap together with ALiBi, per-batch ALiBi slopes)."""
    from ..spec.model import AttentionSpec

    dtype = SPEC_DTYPES.get(options.dtype)
    if dtype is None:
        raise ValueError(f"q, k and v must be torch.float16 or torch.bfloat16 (attngen's kernels), got "
                         f"torch.{options.dtype}; cast them (a Transformers model: load it with "
                         f"dtype=torch.bfloat16, or run it under torch.autocast)")
    fields: dict[str, Any] = {"head_dim": options.head_dim, "dtype": dtype, "mask": mask_field(options.window),
                              "deterministic": options.deterministic}
    score_mod = score_mod_field(options)
    if score_mod is not None:
        fields["score_mod"] = score_mod
    if options.sinks:
        fields["sinks"] = "learnable"
    spec = AttentionSpec(**fields)
    if options.deterministic:
        spec = spec.model_copy(update={"name": f"{spec.name}_det"[:64]})
    return spec


def mask_field(window: tuple[int, int]) -> Any:
    """The spec's `mask` for a flash_attn window: none, causal, or a sliding window."""
    if window == (-1, -1):
        return "none"
    if window == (-1, 0):
        return "causal"
    return {"kind": "sliding_window", "window": list(window)}


def score_mod_field(options: KernelOptions) -> dict[str, Any] | None:
    """The spec's `score_mod`: softcap, ALiBi (runtime slopes), or one expression holding both."""
    cap, alibi = options.softcap, options.alibi
    if alibi == "none":
        return {"softcap": cap} if cap > 0 else None
    if alibi == "heads" and cap == 0:
        return {"alibi": "runtime"}
    index = "b, h" if alibi == "batch_heads" else "h"
    shape = ["batch", "heads"] if alibi == "batch_heads" else ["heads"]
    score = f"{cap!r} * tanh(score / {cap!r})" if cap > 0 else "score"
    expr = f"{score} - {EXPR_SLOPES}[{index}] * abs(q_idx + sk - sq - kv_idx)"
    return {"expr": expr, "tensors": {EXPR_SLOPES: {"dtype": "fp32", "shape": shape}}}
