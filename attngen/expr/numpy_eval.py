"""The float64 reference: an expression evaluated over NumPy arrays that broadcast.

INT values are int64, FLOAT float64, BOOL bool. Python's semantics: `//` and `%` floor, `/` and `**`
give floats, `min`/`max` return the first least/greatest argument. Where Python would raise, the value is
defined instead: an INT `x // 0` and `x % 0` are 0, float division follows IEEE (inf, nan), `**` is C's
`pow` (a negative base with a fractional exponent gives nan), `floor` saturates into the int32 range (nan
gives 0). Tensor indices are clamped into [0, dim - 1].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import reduce
from types import MappingProxyType
from typing import Any

import numpy as np

from .errors import ExprError
from .nodes import INT32_MAX, INT32_MIN, BoolOp, Call, Compare, Const, Expr, IfExp, Not, TensorRef, Ty, Unary, Var

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DTYPES = {Ty.INT: np.int64, Ty.FLOAT: np.float64, Ty.BOOL: np.bool_}


def evaluate(expr: Expr, env: Mapping[str, Any], tensors: Mapping[str, np.ndarray] = _EMPTY,
             scalars: Mapping[str, float | int] = _EMPTY) -> np.ndarray:
    """The value of `expr` at every point of the broadcast of `env`'s arrays (b, h, q_idx, kv_idx, sq, sk,
    score); declared scalars come from `scalars` (or `env`), tensors from `tensors`."""
    with np.errstate(all="ignore"):
        return np.asarray(_Eval(env, tensors, scalars).run(expr))


def cast(x: Any, ty: Ty) -> np.ndarray:
    return np.asarray(x).astype(_DTYPES[ty], copy=False)


def floor_int(x: np.ndarray) -> np.ndarray:
    """floor into the int32 range, nan -> 0 (the language's `floor` of a float)."""
    f = np.floor(np.asarray(x, dtype=np.float64))
    f = np.where(np.isnan(f), 0.0, np.clip(f, INT32_MIN, INT32_MAX))
    return f.astype(np.int64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def pick_min(values: list[np.ndarray]) -> np.ndarray:
    """Python's min: the first argument unless a later one is smaller."""
    return reduce(lambda m, x: np.where(x < m, x, m), values)


def pick_max(values: list[np.ndarray]) -> np.ndarray:
    return reduce(lambda m, x: np.where(x > m, x, m), values)


_FLOAT_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "sigmoid": sigmoid}


def arith(op: str, a: np.ndarray, b: np.ndarray, ty: Ty) -> np.ndarray:
    """One binary arithmetic operation on values already cast to the operation's type."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return np.true_divide(a, b)
    if op == "**":
        return np.power(a, b)
    if ty is Ty.INT:
        zero = b == 0
        safe = np.where(zero, 1, b)
        value = np.floor_divide(a, safe) if op == "//" else np.mod(a, safe)
        return np.where(zero, 0, value)
    return np.floor_divide(a, b) if op == "//" else np.mod(a, b)


def compare(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
            "!=": np.not_equal}[op](a, b)


class _Eval:
    def __init__(self, env: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
                 scalars: Mapping[str, float | int]) -> None:
        self.env = env
        self.tensors = tensors
        self.scalars = scalars

    def run(self, e: Expr) -> np.ndarray:
        if isinstance(e, Const):
            return cast(e.value, e.ty)
        if isinstance(e, Var):
            return self.var(e)
        if isinstance(e, TensorRef):
            return self.tensor(e)
        if isinstance(e, Unary):
            return -self.run(e.x)
        if isinstance(e, Compare):
            a, b = self.run(e.a), self.run(e.b)
            return compare(e.op, a, b)
        if isinstance(e, BoolOp):
            combine = np.logical_and if e.op == "and" else np.logical_or
            return reduce(combine, (self.run(x) for x in e.items))
        if isinstance(e, Not):
            return np.logical_not(self.run(e.x))
        if isinstance(e, IfExp):
            return np.where(self.run(e.cond), cast(self.run(e.a), e.ty), cast(self.run(e.b), e.ty))
        if isinstance(e, Call):
            return self.call(e)
        operand_ty = Ty.FLOAT if e.ty is Ty.FLOAT else Ty.INT
        return arith(e.op, cast(self.run(e.a), operand_ty), cast(self.run(e.b), operand_ty), e.ty)

    def var(self, e: Var) -> np.ndarray:
        if e.name in self.env:
            value = self.env[e.name]
        elif e.name in self.scalars:
            value = self.scalars[e.name]
        else:
            raise ExprError(f"no value for '{e.name}'; pass it in env (b, h, q_idx, kv_idx, sq, sk, score) "
                            "or scalars")
        return cast(value, e.ty)

    def tensor(self, e: TensorRef) -> np.ndarray:
        if e.name not in self.tensors:
            raise ExprError(f"no array for the tensor '{e.name}'; pass it in tensors")
        array = np.asarray(self.tensors[e.name])
        if array.ndim != len(e.indices):
            raise ExprError(f"the tensor '{e.name}' is read with {len(e.indices)} indices but its array has "
                            f"{array.ndim} dims")
        if 0 in array.shape:
            raise ExprError(f"the tensor '{e.name}' is empty (shape {array.shape})")
        index = tuple(np.clip(cast(self.run(i), Ty.INT), 0, size - 1)
                      for i, size in zip(e.indices, array.shape, strict=True))
        return cast(array[index], e.ty)

    def call(self, e: Call) -> np.ndarray:
        args = [self.run(a) for a in e.args]
        if e.fn in ("min", "max"):
            values = [cast(a, e.ty) for a in args]
            return pick_min(values) if e.fn == "min" else pick_max(values)
        (x,) = args
        if e.fn == "abs":
            return np.abs(x)
        if e.fn == "floor":
            return x if e.args[0].ty is Ty.INT else floor_int(x)
        return _FLOAT_FUNCTIONS[e.fn](cast(x, Ty.FLOAT))
