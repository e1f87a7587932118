"""Interval operations, one per operator and function of the language (see interval.py for the contract).

FLOAT ends follow IEEE float64 as `evaluate` computes: an end may be +-inf (attained or not) and `nan` says
the value may be NaN. Results of library functions (exp, pow, ...) are widened by two ulps each way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .nodes import INT32_MAX, INT32_MIN, Ty

INF = math.inf
Num = Any  # int (INT ends), float (FLOAT ends, or +-inf)


@dataclass(frozen=True)
class Interval:
    lo: Num
    hi: Num
    #: FLOAT only: the value may be NaN.
    nan: bool = False

    def hull(self, other: Interval) -> Interval:
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi), self.nan or other.nan)

    def contains(self, x: Num) -> bool:
        return self.lo <= x <= self.hi

    @property
    def is_point(self) -> bool:
        return self.lo == self.hi and not self.nan


def point(x: Num) -> Interval:
    return Interval(x, x, isinstance(x, float) and math.isnan(x))


def full(ty: Ty) -> Interval:
    return Interval(-INF, INF, ty is Ty.FLOAT)


def _float(x: Num) -> float:
    try:
        return float(x)
    except OverflowError:
        return INF if x > 0 else -INF


def to_float(iv: Interval) -> Interval:
    return Interval(_float(iv.lo), _float(iv.hi), iv.nan)


def _np(f: Any, *args: float) -> float:
    with np.errstate(all="ignore"):
        return float(f(*(np.float64(a) for a in args)))


def widen(lo: float, hi: float, nan: bool, ulps: int = 2) -> Interval:
    for _ in range(ulps):
        lo = math.nextafter(lo, -INF) if math.isfinite(lo) else lo
        hi = math.nextafter(hi, INF) if math.isfinite(hi) else hi
    return Interval(lo, hi, nan)


def _span(cands: list[Num], nan: bool) -> Interval:
    """The hull of candidate ends; a NaN candidate means any value (and NaN) is possible."""
    if any(isinstance(c, float) and math.isnan(c) for c in cands):
        return Interval(-INF, INF, True)
    return Interval(min(cands), max(cands), nan)


# ---- arithmetic -----------------------------------------------------------------------------
def neg(a: Interval) -> Interval:
    return Interval(-a.hi, -a.lo, a.nan)


def _sum(x: Num, y: Num) -> Num:
    return _float(x) + _float(y) if isinstance(x, float) or isinstance(y, float) else x + y


def add(a: Interval, b: Interval, ty: Ty) -> Interval:
    nan = ty is Ty.FLOAT and (a.nan or b.nan or (a.lo == -INF and b.hi == INF) or (a.hi == INF and b.lo == -INF))
    lo, hi = _sum(a.lo, b.lo), _sum(a.hi, b.hi)
    lo = -INF if isinstance(lo, float) and math.isnan(lo) else lo
    hi = INF if isinstance(hi, float) and math.isnan(hi) else hi
    return Interval(lo, hi, nan)


def _mul0(x: Num, y: Num) -> Num:
    """x * y, where 0 times an unbounded end is 0 (INT ends are exact; an infinite end saturates)."""
    if x == 0 or y == 0:
        return 0
    if isinstance(x, float) or isinstance(y, float):
        fx, fy = _float(x), _float(y)
        if math.isinf(fx) or math.isinf(fy):
            return INF if (fx > 0) == (fy > 0) else -INF
        return fx * fy
    return x * y


def mul(a: Interval, b: Interval, ty: Ty) -> Interval:
    cands = [_mul0(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    nan = ty is Ty.FLOAT and (a.nan or b.nan or (a.contains(0) and not (math.isfinite(b.lo) and math.isfinite(b.hi)))
                              or (b.contains(0) and not (math.isfinite(a.lo) and math.isfinite(a.hi))))
    if ty is Ty.FLOAT:
        cands = [_float(c) for c in cands]
    return _span(cands, nan)


def div(a: Interval, b: Interval) -> Interval:
    if b.contains(0):
        return Interval(-INF, INF, True)
    return _span([x / y for x in (a.lo, a.hi) for y in (b.lo, b.hi)], a.nan or b.nan)


def _fd(x: Num, y: Num) -> Num:
    """x // y for y >= 1, with infinite ends."""
    if y == INF:
        return 0 if x >= 0 else -1
    if not math.isfinite(x):
        return x
    return int(x) // int(y)


def _floordiv_pos(a: Interval, lo: Num, hi: Num) -> Interval:
    cands = [_fd(x, y) for x in (a.lo, a.hi) for y in (lo, hi)]
    return Interval(min(cands), max(cands))


def int_floordiv(a: Interval, b: Interval) -> Interval:
    """INT `//`, divisor split at 0 (x // 0 is 0)."""
    parts = []
    if b.contains(0):
        parts.append(Interval(0, 0))
    if b.hi >= 1:
        parts.append(_floordiv_pos(a, max(b.lo, 1), b.hi))
    if b.lo <= -1:  # a // y == (-a) // (-y)
        parts.append(_floordiv_pos(neg(a), max(-b.hi, 1), -b.lo))
    result = parts[0]
    for part in parts[1:]:
        result = result.hull(part)
    return result


def int_mod(a: Interval, b: Interval) -> Interval:
    """INT `%`: exact for a constant divisor when the range does not wrap; x % 0 is 0."""
    if b.is_point and b.lo != 0 and math.isfinite(a.lo) and math.isfinite(a.hi):
        c = b.lo
        if a.lo // c == a.hi // c:
            return Interval(a.lo % c, a.hi % c)
    parts = []
    if b.contains(0):
        parts.append(Interval(0, 0))
    if b.hi >= 1:
        lo = max(b.lo, 1)
        if a.lo >= 0 and a.hi < lo:
            parts.append(a)
        else:
            parts.append(Interval(0, min(b.hi - 1, a.hi) if a.lo >= 0 else b.hi - 1))
    if b.lo <= -1:
        hi = min(b.hi, -1)
        if hi < a.lo and a.hi <= 0:
            parts.append(a)
        else:
            parts.append(Interval(max(b.lo + 1, a.lo) if a.hi <= 0 else b.lo + 1, 0))
    result = parts[0]
    for part in parts[1:]:
        result = result.hull(part)
    return result


def float_floordiv(a: Interval, b: Interval) -> Interval:
    if b.contains(0):
        return Interval(-INF, INF, True)
    q = div(a, b)
    q = widen(q.lo, q.hi, q.nan)
    nan = q.nan or not (math.isfinite(a.lo) and math.isfinite(a.hi))
    return Interval(_np(np.floor, q.lo) - 1.0, _np(np.floor, q.hi) + 1.0, nan)


def float_mod(a: Interval, b: Interval) -> Interval:
    if b.contains(0):
        return Interval(-INF, INF, True)
    nan = a.nan or b.nan or not (math.isfinite(a.lo) and math.isfinite(a.hi))
    if b.lo > 0:
        return Interval(a.lo, a.hi, nan) if a.lo >= 0 and a.hi < b.lo else Interval(0.0, b.hi, nan)
    return Interval(a.lo, a.hi, nan) if b.hi < a.lo and a.hi <= 0 else Interval(b.lo, 0.0, nan)


def power(a: Interval, b: Interval) -> Interval:
    """`**` (C's pow): exact cases for a constant integer exponent or a base >= 0; otherwise unbounded."""
    nan = a.nan or b.nan
    if b.is_point and float(b.lo).is_integer() and abs(b.lo) < 2**53:
        k = b.lo
        if k == 0:
            return Interval(1.0, 1.0)
        if a.contains(0) and k < 0:
            return Interval(-INF, INF, nan)
        cands = [_np(np.power, x, k) for x in (a.lo, a.hi)] + ([0.0] if a.contains(0) else [])
        span = _span(cands, nan)
        return widen(span.lo, span.hi, span.nan)
    if a.lo >= 0:
        span = _span([_np(np.power, x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)], nan)
        lo = -INF if a.lo == 0 and b.lo < 0 else span.lo  # (-0.0) ** -odd is -inf
        return widen(lo, span.hi, span.nan)
    return Interval(-INF, INF, True)


def arith(op: str, a: Interval, b: Interval, ty: Ty) -> Interval:
    """A binary operator on operands already converted to the operation's type (INT or FLOAT)."""
    if op == "+":
        return add(a, b, ty)
    if op == "-":
        return add(a, neg(b), ty)
    if op == "*":
        return mul(a, b, ty)
    if op == "/":
        return div(to_float(a), to_float(b))
    if op == "**":
        return power(to_float(a), to_float(b))
    if ty is Ty.INT:
        return int_floordiv(a, b) if op == "//" else int_mod(a, b)
    return float_floordiv(a, b) if op == "//" else float_mod(a, b)


# ---- comparisons and functions --------------------------------------------------------------
def compare(op: str, a: Interval, b: Interval) -> tuple[bool, bool]:
    """(may_false, may_true) of `a op b`."""
    if op in ("<", "<="):
        strict = op == "<"
        may_true = a.lo < b.hi if strict else a.lo <= b.hi
        may_false = a.hi >= b.lo if strict else a.hi > b.lo
    elif op in (">", ">="):
        may_false, may_true = compare("<" if op == ">" else "<=", b, a)
    else:
        overlap = a.lo <= b.hi and b.lo <= a.hi
        single = a.lo == a.hi == b.lo == b.hi
        may_false, may_true = (not single, overlap)
        if op == "!=":
            may_false, may_true = may_true, may_false
    if a.nan or b.nan:
        may_true, may_false = (True, may_false) if op == "!=" else (may_true, True)
    return may_false, may_true


def min_max(fn: str, args: list[Interval]) -> Interval:
    if any(a.nan for a in args):  # a NaN argument may be skipped or returned
        result = args[0]
        for a in args[1:]:
            result = result.hull(a)
        return Interval(result.lo, result.hi, True)
    pick = min if fn == "min" else max
    return Interval(pick(a.lo for a in args), pick(a.hi for a in args))


def absolute(a: Interval) -> Interval:
    if a.lo >= 0:
        return a
    if a.hi <= 0:
        return neg(a)
    return Interval(0 if isinstance(a.lo, int) else 0.0, max(-a.lo, a.hi), a.nan)


def floor(a: Interval) -> Interval:
    """floor of a FLOAT into the int32 range (NaN -> 0)."""

    def f(x: float) -> int:
        return int(min(max(_np(np.floor, x), INT32_MIN), INT32_MAX))

    lo, hi = f(a.lo), f(a.hi)
    return Interval(min(lo, 0), max(hi, 0)) if a.nan else Interval(lo, hi)


_MONOTONE = {"exp": np.exp, "tanh": np.tanh, "log": np.log, "sqrt": np.sqrt,
             "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}


def monotone(fn: str, a: Interval) -> Interval:
    """exp, log, tanh, sigmoid, sqrt: increasing; log and sqrt are NaN below 0."""
    nan = a.nan
    lo, hi = a.lo, a.hi
    if fn in ("log", "sqrt") and lo < 0:
        if hi < 0:
            return Interval(-INF, INF, True)
        nan, lo = True, 0.0
    f = _MONOTONE[fn]
    return widen(_np(f, lo), _np(f, hi), nan)
