"""The peers' equivalents of a variant: for FlexAttention its mask as `mask_mod(b, h, q_idx, kv_idx)`, its score
mod as `score_mod(score, b, h, q_idx, kv_idx)` and learnable sinks through its LSE; for FlashAttention-4 the
keywords of `flash_attn.cute.flash_attn_func` (fa4_kwargs); and each one's call as `attngen bench --variant`
checks and times it (`Prepared`).

The mods are built from the expression trees (attngen.expr) with torch operations only, so torch.compile and
vmap trace them. The semantics are the variant language's (attngen.expr.numpy_eval): `//` and `%` floor (an
INT division by zero gives 0), `min`/`max` pick the first least/greatest argument, `floor` saturates into the
int32 range (nan gives 0), tensor reads clamp each index into its dim. A value is a Python number where the
tree is constant at trace time (constants, `sq`, `sk`, declared scalars) and a tensor elsewhere; the call's
runtime tensors are captured in the closure.

Sinks: with `out, lse = flex(...)` the sink logit s joins the denominator as `out * sigmoid(lse - s)`.
FlashAttention-4 takes sinks in bf16 (`learnable_sink`) and returns no gradient for them.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from ..expr import nodes
from ..expr import numpy_eval as npe
from ..expr.nodes import BoolOp, Call, Compare, Const, IfExp, Not, TensorRef, Ty, Unary, Var
from ..features.variant import Variant, variant_of
from ..spec.model import AttentionSpec
from ..spec.variant import MaskKind, SinksKind
from .peers import Unavailable, fa4

if TYPE_CHECKING:
    import torch

_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
            "!=": operator.ne}
_NUMPY_FUNCTIONS: dict[str, Callable[[Any], Any]] = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "sigmoid": npe.sigmoid}
#: How the FlexAttention equivalent applies learnable sinks.
SINKS_NOTE = "sinks: out * sigmoid(lse - sink), FlexAttention's natural-log LSE"


@dataclass(frozen=True)
class Closure:
    """What the mods read besides their arguments: the call's lengths, tensors and scalars."""

    sq: int
    sk: int
    tensors: Mapping[str, Any] = field(default_factory=dict)
    scalars: Mapping[str, float | int] = field(default_factory=dict)


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def cast(x: Any, ty: Ty) -> Any:
    """`x` as the language type `ty` (only widening happens: INT to FLOAT, or none)."""
    import torch

    if not _is_tensor(x):
        return {Ty.FLOAT: float, Ty.INT: int, Ty.BOOL: bool}[ty](x)
    if ty is Ty.FLOAT and not x.is_floating_point():
        return x.to(torch.float32)
    if ty is Ty.INT and x.dtype == torch.bool:
        return x.to(torch.int32)
    return x


def _python_arith(op: str, a: Any, b: Any, ty: Ty) -> Any:
    """Both operands constant: the NumPy reference's own arithmetic, back as a Python number."""
    dtype = np.float64 if ty is Ty.FLOAT or op in ("/", "**") else np.int64
    with np.errstate(all="ignore"):
        value = npe.arith(op, np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype), ty)
    return value.item()


def arith(op: str, a: Any, b: Any, ty: Ty) -> Any:
    import torch

    operand = Ty.FLOAT if ty is Ty.FLOAT else Ty.INT
    a, b = cast(a, operand), cast(b, operand)
    if not _is_tensor(a) and not _is_tensor(b):
        return _python_arith(op, a, b, ty)
    if op in ("+", "-", "*", "/"):
        return {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[op](a, b)
    if op == "**":
        return torch.pow(a, b)
    floor_op = operator.floordiv if op == "//" else operator.mod
    if operand is Ty.FLOAT:
        return floor_op(a, b)
    if not _is_tensor(b):
        return a * 0 if b == 0 else floor_op(a, b)
    zero = b == 0
    return torch.where(zero, 0, floor_op(a, torch.where(zero, 1, b)))


def _pick(fn: str, values: list[Any]) -> Any:
    """Python's min / max: a later argument replaces the pick only when strictly less / greater."""
    import torch

    better = operator.lt if fn == "min" else operator.gt

    def step(m: Any, x: Any) -> Any:
        if not _is_tensor(m) and not _is_tensor(x):
            return x if better(x, m) else m
        return torch.where(better(x, m), x, m)

    return reduce(step, values)


def _floor(x: Any) -> Any:
    import torch

    if not _is_tensor(x):
        return int(npe.floor_int(np.asarray(x)))
    f = torch.floor(x)
    f = torch.where(torch.isnan(f), torch.zeros_like(f), f).clamp(nodes.INT32_MIN, nodes.INT32_MAX)
    return f.to(torch.int64).clamp(nodes.INT32_MIN, nodes.INT32_MAX)


class _Translate:
    """One walk of a tree at trace time, with the mod's arguments bound."""

    def __init__(self, env: Mapping[str, Any], closure: Closure) -> None:
        self.env = env
        self.closure = closure

    def run(self, e: nodes.Expr) -> Any:
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Var):
            return cast(self.var(e.name), e.ty)
        if isinstance(e, TensorRef):
            return self.tensor(e)
        if isinstance(e, Unary):
            return -self.run(e.x)
        if isinstance(e, Compare):
            return _COMPARE[e.op](self.run(e.a), self.run(e.b))
        if isinstance(e, BoolOp):
            return reduce(operator.and_ if e.op == "and" else operator.or_, (self.run(x) for x in e.items))
        if isinstance(e, Not):
            x = self.run(e.x)
            return ~x if _is_tensor(x) else not x
        if isinstance(e, IfExp):
            return self.if_exp(e)
        if isinstance(e, Call):
            return self.call(e)
        return arith(e.op, self.run(e.a), self.run(e.b), e.ty)

    def var(self, name: str) -> Any:
        if name in self.env:
            return self.env[name]
        if name in ("sq", "sk"):
            return getattr(self.closure, name)
        return self.closure.scalars[name]

    def tensor(self, e: TensorRef) -> Any:
        t = self.closure.tensors[e.name]
        index = []
        for i, size in zip(e.indices, t.shape, strict=True):
            value = cast(self.run(i), Ty.INT)
            index.append(value.clamp(0, size - 1) if _is_tensor(value) else min(max(value, 0), size - 1))
        return cast(t[tuple(index)], e.ty)

    def if_exp(self, e: IfExp) -> Any:
        import torch

        cond = self.run(e.cond)
        if not _is_tensor(cond):
            return cast(self.run(e.a if cond else e.b), e.ty)
        return torch.where(cond, cast(self.run(e.a), e.ty), cast(self.run(e.b), e.ty))

    def call(self, e: Call) -> Any:
        import torch

        args = [self.run(a) for a in e.args]
        if e.fn in ("min", "max"):
            return _pick(e.fn, [cast(a, e.ty) for a in args])
        (x,) = args
        if e.fn == "abs":
            return abs(x)
        if e.fn == "floor":
            return x if e.args[0].ty is Ty.INT else _floor(x)
        if not _is_tensor(x):
            with np.errstate(all="ignore"):
                return float(_NUMPY_FUNCTIONS[e.fn](np.float64(x)))
        return getattr(torch, e.fn)(cast(x, Ty.FLOAT))


def mask_mod(tree: nodes.Expr | None, closure: Closure) -> Callable[..., Any]:
    """`mask_mod(b, h, q_idx, kv_idx)` -> bool tensor; `tree` None: every key visible."""

    def mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        seen = True if tree is None else _Translate({"b": b, "h": h, "q_idx": q_idx, "kv_idx": kv_idx},
                                                    closure).run(tree)
        if _is_tensor(seen):
            return seen
        return (q_idx == q_idx) if seen else (q_idx != q_idx)

    return mod


def score_mod(tree: nodes.Expr, closure: Closure) -> Callable[..., Any]:
    """`score_mod(score, b, h, q_idx, kv_idx)` -> the modded score, in the score's dtype."""
    import torch

    def mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        env = {"score": score, "b": b, "h": h, "q_idx": q_idx, "kv_idx": kv_idx}
        value = _Translate(env, closure).run(tree)
        if not _is_tensor(value):
            return torch.zeros_like(score) + value
        return value.to(score.dtype)

    return mod


def closure_of(variant: Variant, args: Mapping[str, Any], sq: int, sk: int, heads: int, device: Any) -> Closure:
    """The call's runtime tensors and scalars (attngen's computed ones, ALiBi's standard slopes, added)."""
    import torch

    from ..features.score_mod import alibi_slopes

    tensors: dict[str, Any] = {}
    scalars: dict[str, float | int] = {}
    for arg in variant.arguments():
        if arg.computed:
            tensors[arg.name] = torch.tensor(alibi_slopes(heads), dtype=torch.float32, device=device)
        elif arg.is_tensor:
            tensors[arg.name] = args[arg.name].detach()
        else:
            scalars[arg.name] = args[arg.name]
    return Closure(sq, sk, tensors, scalars)


@dataclass(frozen=True)
class FlexEquivalent:
    """A variant's FlexAttention call on q, k, v of shape (batch, heads, seqlen, head_dim)."""

    mask_mod: Callable[..., Any] | None
    score_mod: Callable[..., Any] | None
    #: The mask reads `b` / `h`: the block mask is built per batch element / head.
    per_batch: bool
    per_head: bool
    #: The sinks tensor (heads,), or None.
    sinks: Any

    def block_mask(self, batch: int, heads: int, sq: int, sk: int, device: Any) -> Any:
        if self.mask_mod is None:
            return None
        from torch.nn.attention.flex_attention import create_block_mask

        return create_block_mask(self.mask_mod, batch if self.per_batch else None,
                                 heads if self.per_head else None, sq, sk, device=device)

    def forward(self, flex: Callable[..., Any], block_mask: Any) -> Callable[..., torch.Tensor]:
        """(q, k, v) -> out through `flex` (flex_attention, or its compiled form), sinks applied."""
        mods, sinks = {"score_mod": self.score_mod, "block_mask": block_mask}, self.sinks
        if sinks is None:
            return lambda q, k, v: flex(q, k, v, **mods)

        def with_sinks(q: Any, k: Any, v: Any) -> Any:
            import torch

            out, lse = _out_lse(flex(q, k, v, **mods, **_lse_request()))
            keep = torch.sigmoid(lse - sinks.to(lse.dtype)[None, :, None])
            return out * keep[..., None].to(out.dtype)

        return with_sinks


def _lse_request() -> dict[str, Any]:
    from torch.nn.attention import flex_attention as fa

    request = getattr(fa, "AuxRequest", None)
    return {"return_aux": request(lse=True)} if request is not None else {"return_lse": True}


def _out_lse(result: Any) -> tuple[Any, Any]:
    out, aux = result
    return out, getattr(aux, "lse", aux)


def equivalent(variant: Variant, closure: Closure, sinks: Any = None) -> FlexEquivalent:
    """The FlexAttention mods of `variant` over `closure`; `sinks` the call's sinks tensor (if it has them)."""
    tree = variant.mask.parsed()
    mmod = mask_mod(tree, closure) if tree is not None else None
    smod = score_mod(variant.score_mod.parsed(), closure) if variant.score_mod is not None else None
    per_batch = tree is not None and nodes.depends_on(tree, "b")
    per_head = tree is not None and nodes.depends_on(tree, "h")
    if variant.sinks is not None and sinks is None:
        raise ValueError("the variant has learnable sinks; pass its sinks tensor")
    return FlexEquivalent(mmod, smod, per_batch, per_head, sinks if variant.sinks is not None else None)


# ---- FlashAttention-4 ------------------------------------------------------------------------------------------


def fa4_kwargs(spec: AttentionSpec, params: Sequence[str]) -> dict[str, Any]:
    """flash_attn.cute.flash_attn_func's keywords for the variant (`learnable_sink` True: pass the sinks);
    Unavailable when it has none (params: the names its signature takes)."""
    kind, kw = spec.mask.kind, dict[str, Any]()
    if kind is MaskKind.causal:
        kw["causal"] = True
    elif kind is MaskKind.sliding_window and spec.mask.window is not None:
        kw["window_size"] = tuple(None if side < 0 else side for side in spec.mask.window)
    elif kind is not MaskKind.none:
        raise Unavailable(f"FlashAttention-4 has no {kind.value} mask")
    if spec.score_mod is not None:
        if spec.score_mod.softcap is None:
            raise Unavailable(f"FlashAttention-4 has no score mod {spec.score_mod.name_part} (softcap only)")
        kw["softcap"] = spec.score_mod.softcap
    if spec.sinks is SinksKind.learnable:
        kw["learnable_sink"] = True
    missing = [k for k in kw if k not in params]
    if missing:
        raise Unavailable(f"this flash_attn_func takes no {', '.join(missing)}")
    return kw


# ---- the calls timed ---------------------------------------------------------------------------------------


@dataclass
class Inputs:
    """q, k, v and dout (batch, seqlen, heads, head_dim) and the runtime arguments of one shape."""

    q: Any
    k: Any
    v: Any
    dout: Any
    args: dict[str, Any]

    def leaves(self, layout: Callable[[Any], Any] = lambda t: t) -> tuple[Any, ...]:
        return tuple(layout(t).detach().clone().requires_grad_() for t in (self.q, self.k, self.v))


@dataclass
class Prepared:
    """One implementation on one set of inputs: forward() -> out (batch, seqlen, heads, head_dim); `leaves` what
    the backward differentiates (q, k, v, then sinks), `names` their gradients' names."""

    forward: Callable[[], Any]
    leaves: tuple[Any, ...]
    names: tuple[str, ...]
    #: q, k, v leaves are (batch, heads, seqlen, head_dim).
    heads_first: bool = False


def sinks_leaf(args: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh copy of the call's sinks that requires grad ({} without sinks)."""
    return {n: t.detach().clone().requires_grad_() for n, t in args.items() if n == "sinks"}


def prepare_flex(spec: AttentionSpec, x: Inputs) -> Prepared:
    """flex_attention with the variant's mods under torch.compile (one graph), its block mask built here; q, k, v
    in its (batch, heads, seqlen, head_dim) layout."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    from .peers import raise_dynamo_limits

    raise_dynamo_limits()
    var = variant_of(spec)
    batch, seqlen, heads, _ = x.q.shape
    sinks = sinks_leaf(x.args)
    closure = closure_of(var, x.args, seqlen, x.k.shape[1], heads, x.q.device)
    equiv = equivalent(var, closure, sinks.get("sinks"))
    block = equiv.block_mask(batch, heads, seqlen, x.k.shape[1], x.q.device)
    compiled = torch.compile(equiv.forward(flex_attention, block), dynamic=False, fullgraph=True)
    q, k, v = x.leaves(lambda t: t.transpose(1, 2).contiguous())
    return Prepared(lambda: compiled(q, k, v).transpose(1, 2), (q, k, v, *sinks.values()),
                    ("dq", "dk", "dv", *("dsinks" for _ in sinks)), heads_first=True)


def prepare_fa4(spec: AttentionSpec, x: Inputs) -> Prepared:
    """flash_attn.cute.flash_attn_func with the variant's keywords; Unavailable without it or without them."""
    import torch

    flash_attn_func = fa4().flash_attn_func

    kw = fa4_kwargs(spec, list(inspect.signature(flash_attn_func).parameters))
    if kw.get("learnable_sink"):
        kw["learnable_sink"] = x.args["sinks"].detach().to(torch.bfloat16)
    q, k, v = x.leaves()

    def forward() -> Any:
        out = flash_attn_func(q, k, v, **kw)
        return out[0] if isinstance(out, tuple) else out

    return Prepared(forward, (q, k, v), ("dq", "dk", "dv"))
