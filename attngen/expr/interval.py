"""Interval arithmetic over expressions: the tile classifier's mathematics.

`bounds(expr, env)` over-approximates soundly: for every assignment of the names inside their intervals,
the value `evaluate` computes lies inside the result (a FLOAT result also says whether it may be NaN);
for a boolean, `may_true` is set if some assignment makes it True, `may_false` likewise. INT intervals use
Python ints, with -inf/+inf floats for unbounded ends, and assume no int64 overflow. Tensor values are
assumed not to be NaN. `classify` applies this to a mask over a tile of (q_idx, kv_idx).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

import numpy as np

from . import interval_ops as ops
from .interval_ops import INF, Interval, full, point
from .nodes import INT32_MAX, INT32_MIN, BoolOp, Call, Compare, Const, Expr, IfExp, Not, TensorRef, Ty, Unary, Var

TensorBounds = Callable[[str, tuple[Interval, ...]], Interval | None]
_NO_ENV: Mapping[str, Interval | int | float] = MappingProxyType({})


@dataclass(frozen=True)
class BoolBounds:
    may_false: bool
    may_true: bool

    def hull(self, other: BoolBounds) -> BoolBounds:
        return BoolBounds(self.may_false or other.may_false, self.may_true or other.may_true)


Bounds = Interval | BoolBounds


class TileClass(Enum):
    EMPTY = 0
    PARTIAL = 1
    FULL = 2


def bounds(expr: Expr, env: Mapping[str, Interval | int | float] = _NO_ENV,
           tensor_bounds: TensorBounds | None = None) -> Bounds:
    """Sound bounds of `expr` when each name lies in its env interval (a number: a point; absent: any value
    of its type). `tensor_bounds(name, index_intervals)` bounds a tensor read (None: its dtype's range)."""
    return Bounder(env, tensor_bounds).of(expr)


def classify(mask: Expr, q: tuple[int, int], kv: tuple[int, int], points: Mapping[str, int | float],
             tensor_bounds: TensorBounds | None = None) -> TileClass:
    """EMPTY if no element of the tile q x kv (inclusive ranges) can be visible, FULL if none can be hidden."""
    env: dict[str, Interval | int | float] = dict(points)
    env["q_idx"], env["kv_idx"] = Interval(*q), Interval(*kv)
    result = bounds(mask, env, tensor_bounds)
    assert isinstance(result, BoolBounds)
    if not result.may_true:
        return TileClass.EMPTY
    return TileClass.PARTIAL if result.may_false else TileClass.FULL


def as_interval(value: Interval | int | float, ty: Ty) -> Interval:
    if isinstance(value, Interval):
        return ops.to_float(value) if ty is Ty.FLOAT else value
    return point(float(value) if ty is Ty.FLOAT else int(value))


def default_tensor_bounds(ty: Ty) -> Interval:
    """A tensor read nothing bounds: any int32, or any float (not NaN)."""
    return Interval(INT32_MIN, INT32_MAX) if ty is Ty.INT else Interval(-INF, INF)


class Bounder:
    """Bounds of every node of a tree under one env, each computed once (`of` memoizes by node identity)."""

    def __init__(self, env: Mapping[str, Interval | int | float], tensor_bounds: TensorBounds | None) -> None:
        self.env = env
        self.tensor_bounds = tensor_bounds
        self.memo: dict[int, tuple[Expr, Bounds]] = {}

    def of(self, e: Expr) -> Bounds:
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        result = self._compute(e)
        self.memo[id(e)] = (e, result)
        return result

    def num(self, e: Expr, ty: Ty | None = None) -> Interval:
        """The numeric bounds of `e`, converted to `ty` (FLOAT: float ends)."""
        result = self.of(e)
        assert isinstance(result, Interval)
        return ops.to_float(result) if (ty or e.ty) is Ty.FLOAT else result

    def boolean(self, e: Expr) -> BoolBounds:
        result = self.of(e)
        assert isinstance(result, BoolBounds)
        return result

    def _compute(self, e: Expr) -> Bounds:
        if isinstance(e, Const):
            return BoolBounds(not e.value, bool(e.value)) if e.ty is Ty.BOOL else point(e.value)
        if isinstance(e, Var):
            return as_interval(self.env[e.name], e.ty) if e.name in self.env else full(e.ty)
        if isinstance(e, TensorRef):
            return self._tensor(e)
        if isinstance(e, Unary):
            return ops.neg(self.num(e.x))
        if isinstance(e, Compare):
            return self._compare(e)
        if isinstance(e, BoolOp):
            items = [self.boolean(x) for x in e.items]
            if e.op == "and":
                return BoolBounds(any(i.may_false for i in items), all(i.may_true for i in items))
            return BoolBounds(all(i.may_false for i in items), any(i.may_true for i in items))
        if isinstance(e, Not):
            x = self.boolean(e.x)
            return BoolBounds(x.may_true, x.may_false)
        if isinstance(e, IfExp):
            return self._ifexp(e)
        if isinstance(e, Call):
            return self._call(e)
        operand = Ty.FLOAT if e.ty is Ty.FLOAT else Ty.INT
        return ops.arith(e.op, self.num(e.a, operand), self.num(e.b, operand), e.ty)

    def _tensor(self, e: TensorRef) -> Interval:
        indices = tuple(self.num(i) for i in e.indices)
        found = self.tensor_bounds(e.name, indices) if self.tensor_bounds is not None else None
        if found is None:
            return default_tensor_bounds(e.ty)
        return ops.to_float(found) if e.ty is Ty.FLOAT else found

    def _compare(self, e: Compare) -> BoolBounds:
        if e.a.ty is Ty.BOOL:
            a, b = self.boolean(e.a), self.boolean(e.b)
            same = (a.may_true and b.may_true) or (a.may_false and b.may_false)
            differ = (a.may_true and b.may_false) or (a.may_false and b.may_true)
            return BoolBounds(differ, same) if e.op == "==" else BoolBounds(same, differ)
        ty = Ty.FLOAT if Ty.FLOAT in (e.a.ty, e.b.ty) else Ty.INT
        may_false, may_true = ops.compare(e.op, self.num(e.a, ty), self.num(e.b, ty))
        return BoolBounds(may_false, may_true)

    def _ifexp(self, e: IfExp) -> Bounds:
        cond = self.boolean(e.cond)
        if e.ty is Ty.BOOL:
            a, b = self.boolean(e.a), self.boolean(e.b)
            return a if not cond.may_false else b if not cond.may_true else a.hull(b)
        x, y = self.num(e.a, e.ty), self.num(e.b, e.ty)
        return x if not cond.may_false else y if not cond.may_true else x.hull(y)

    def _call(self, e: Call) -> Interval:
        if e.fn in ("min", "max"):
            return ops.min_max(e.fn, [self.num(a, e.ty) for a in e.args])
        (arg,) = e.args
        if e.fn == "abs":
            return ops.absolute(self.num(arg))
        if e.fn == "floor":
            return self.num(arg) if arg.ty is Ty.INT else ops.floor(self.num(arg))
        return ops.monotone(e.fn, self.num(arg, Ty.FLOAT))


def tensor_bounds_from_arrays(arrays: Mapping[str, np.ndarray]) -> TensorBounds:
    """Exact bounds of each tensor over the (clamped) box of indices: a reference for tests and tools."""

    def box(name: str, indices: tuple[Interval, ...]) -> Interval | None:
        array = np.asarray(arrays[name])
        cut = []
        for iv, size in zip(indices, array.shape, strict=True):
            lo = int(min(max(iv.lo, 0), size - 1))
            hi = int(min(max(iv.hi, 0), size - 1))
            cut.append(slice(lo, hi + 1))
        part = array[tuple(cut)]
        if np.issubdtype(array.dtype, np.integer):
            return Interval(int(part.min()), int(part.max()))
        nan = bool(np.isnan(part).any())
        if nan and np.isnan(part).all():
            return Interval(-INF, INF, True)
        return Interval(float(np.nanmin(part)), float(np.nanmax(part)), nan)

    return box


__all__ = ["INF", "BoolBounds", "Bounder", "Bounds", "Interval", "TileClass", "bounds", "classify",
           "tensor_bounds_from_arrays"]
