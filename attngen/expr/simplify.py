"""Algebraic clean-up of derived expressions, value-preserving for finite inputs.

Constants fold (a result that is not finite, or an INT outside the int32 range, stays unfolded); sums and
FLOAT products are flattened, their constant terms and factors combined exactly (as fractions, rounded
once), zero terms and unit factors dropped, x * 0 is 0, and a term cancels its negation. Also: double
negation, x ** 1, x ** 0, (a if c else a), constant conditions, not not x, and/or with constants. A
subexpression keeps its type (an INT left where a FLOAT stood is written 1.0 * x).
"""

from __future__ import annotations

import math
from fractions import Fraction

from . import nodes as n
from .nodes import (
    INT32_MAX,
    INT32_MIN,
    Binary,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Not,
    TensorRef,
    Ty,
    Unary,
    Var,
    children,
)
from .numpy_eval import evaluate


def simplify(expr: Expr) -> Expr:
    return _Simplifier().run(expr)


def as_type(x: Expr, ty: Ty) -> Expr:
    """x converted to `ty` (an INT where a FLOAT is expected)."""
    if x.ty is ty or ty is not Ty.FLOAT:
        return x
    if isinstance(x, Const):
        return Const(float(x.value), Ty.FLOAT)
    return Binary("*", Const(1.0, Ty.FLOAT), x, Ty.FLOAT)


def fold(e: Expr) -> Expr:
    """e as a constant when all its operands are constants and the value is representable."""
    if isinstance(e, Const) or not all(isinstance(c, Const) for c in children(e)) or isinstance(e, TensorRef):
        return e
    value = evaluate(e, {}).item()
    if e.ty is Ty.BOOL:
        return Const(bool(value), Ty.BOOL)
    if e.ty is Ty.INT:
        return Const(int(value), Ty.INT) if INT32_MIN < value <= INT32_MAX else e
    return Const(float(value), Ty.FLOAT) if math.isfinite(value) else e


def _exact(value: Fraction) -> bool:
    try:
        return Fraction(float(value)) == value
    except OverflowError:
        return False


class _Simplifier:
    def __init__(self) -> None:
        self.memo: dict[int, tuple[Expr, Expr]] = {}

    def run(self, e: Expr) -> Expr:
        hit = self.memo.get(id(e))
        if hit is None:
            hit = (e, self._rule(e))
            self.memo[id(e)] = hit
        return hit[1]

    def _rule(self, e: Expr) -> Expr:
        if isinstance(e, (Const, Var)):
            return e
        if isinstance(e, TensorRef):
            return TensorRef(e.name, tuple(self.run(i) for i in e.indices), e.ty)
        if isinstance(e, Binary) and e.op in ("+", "-") or isinstance(e, Unary):
            return self._sum(e)
        if isinstance(e, Binary) and e.op in ("*", "/") and e.ty is Ty.FLOAT:
            return self._product(e)
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Compare):
            return fold(n.compare(e.op, self.run(e.a), self.run(e.b)))
        if isinstance(e, BoolOp):
            return self._boolop(e)
        if isinstance(e, Not):
            x = self.run(e.x)
            return x.x if isinstance(x, Not) else fold(n.not_(x))
        if isinstance(e, IfExp):
            return self._ifexp(e)
        return fold(n.call(e.fn, [self.run(a) for a in e.args]))

    def _binary(self, e: Binary) -> Expr:
        a, b = self.run(e.a), self.run(e.b)
        if e.op == "*" and (_zero(a) or _zero(b)):  # INT product
            return Const(0, Ty.INT)
        if e.op == "*" and _one(a):
            return b
        if e.op == "*" and _one(b):
            return a
        if e.op == "**" and _one(b) and a.ty is Ty.FLOAT:
            return a
        if e.op == "**" and _zero(b):
            return Const(1.0, Ty.FLOAT)
        return fold(n.binary(e.op, a, b))

    def _boolop(self, e: BoolOp) -> Expr:
        absorbing = e.op == "or"  # True absorbs an 'or', False an 'and'
        items: list[Expr] = []
        for item in (self.run(x) for x in e.items):
            if isinstance(item, Const):
                if item.value == absorbing:
                    return item
                continue
            if item not in items:
                items.append(item)
        if not items:
            return Const(not absorbing, Ty.BOOL)
        return items[0] if len(items) == 1 else n.bool_op(e.op, items)

    def _ifexp(self, e: IfExp) -> Expr:
        cond, a, b = self.run(e.cond), self.run(e.a), self.run(e.b)
        if isinstance(cond, Const):
            return as_type(a if cond.value else b, e.ty)
        if a == b:
            return as_type(a, e.ty)
        if isinstance(cond, Not):
            cond, a, b = cond.x, b, a
        return n.if_exp(cond, a, b)

    # ---- sums ----
    def _terms(self, e: Expr, sign: int, out: list[tuple[int, Expr]], simplified: bool = False) -> None:
        if isinstance(e, Binary) and e.op in ("+", "-"):
            self._terms(e.a, sign, out, simplified)
            self._terms(e.b, sign if e.op == "+" else -sign, out, simplified)
        elif isinstance(e, Unary):
            self._terms(e.x, -sign, out, simplified)
        elif simplified:
            out.append((sign, e))
        else:
            leaf = self.run(e)
            if isinstance(leaf, Unary) or (isinstance(leaf, Binary) and leaf.op in ("+", "-")):
                self._terms(leaf, sign, out, True)
            else:
                out.append((sign, leaf))

    def _sum(self, e: Expr) -> Expr:
        terms: list[tuple[int, Expr]] = []
        self._terms(e, 1, terms)
        total: Fraction | int = Fraction(0) if e.ty is Ty.FLOAT else 0
        first_const = bool(terms) and isinstance(terms[0][1], Const)
        counts: dict[Expr, int] = {}
        for sign, term in terms:
            if isinstance(term, Const):
                total += sign * (Fraction(term.value) if e.ty is Ty.FLOAT else int(term.value))
            else:
                counts[term] = counts.get(term, 0) + sign
        kept = [(1 if k > 0 else -1, _times(abs(k), term)) for term, k in counts.items() if k != 0]
        choice = _constant_choice(kept, total, e.ty)
        if choice is not None:
            return choice
        constant = _number(total, e.ty)
        if constant is None:  # too large for one literal: keep the constant terms as they were
            kept += [(sign, term) for sign, term in terms if isinstance(term, Const)]
        elif total != 0:
            kept.insert(0 if first_const or not kept else len(kept), (1, constant))
        return as_type(_rebuild_sum(kept, e.ty), e.ty)

    # ---- products ----
    def _factors(self, e: Expr, power: int, out: list[tuple[int, Expr]], coef: list[Fraction]) -> None:
        if isinstance(e, Binary) and e.ty is Ty.FLOAT and e.op in ("*", "/"):
            self._factors(e.a, power, out, coef)
            self._factors(e.b, power if e.op == "*" else -power, out, coef)
            return
        if isinstance(e, Unary) and e.ty is Ty.FLOAT:  # an INT -0 is 0: its sign does not move out
            coef[0] = -coef[0]
            self._factors(e.x, power, out, coef)
            return
        leaf = self.run(e)
        if leaf is not e and leaf.ty is Ty.FLOAT and (isinstance(leaf, Unary) or (isinstance(leaf, Binary)
                                                                                  and leaf.op in ("*", "/"))):
            self._factors(leaf, power, out, coef)
        elif isinstance(leaf, Const) and (power == 1 or leaf.value != 0):
            value = Fraction(leaf.value)
            coef[0] = coef[0] * value if power == 1 else coef[0] / value
        else:
            out.append((power, leaf))

    def _product(self, e: Expr) -> Expr:
        factors: list[tuple[int, Expr]] = []
        coef = [Fraction(1)]
        self._factors(e, 1, factors, coef)
        return self._assemble(factors, coef[0])

    def _assemble(self, factors: list[tuple[int, Expr]], c: Fraction) -> Expr:
        """The product; a factor (x if cond else 0.0) takes the others into its branch, so that a zero
        branch stays 0 even where they are not finite (the derivative of a branch not taken)."""
        for i, (power, f) in enumerate(factors):
            if power == 1 and isinstance(f, IfExp) and f.ty is Ty.FLOAT and (_zero(f.a) or _zero(f.b)):
                rest = factors[:i] + factors[i + 1:]
                a, b = (Const(0.0, Ty.FLOAT) if _zero(x) else self._times_branch(rest, c, x) for x in (f.a, f.b))
                return n.if_exp(f.cond, a, b)
        return self._rebuild_product(factors, c)

    def _times_branch(self, rest: list[tuple[int, Expr]], c: Fraction, branch: Expr) -> Expr:
        factors = list(rest)
        coef = [c]
        self._factors(branch, 1, factors, coef)
        return self._assemble(factors, coef[0])

    def _rebuild_product(self, factors: list[tuple[int, Expr]], c: Fraction) -> Expr:
        if c == 0 and all(p == 1 for p, _ in factors):  # 0 * x; but 0 / y stays (y may be 0)
            return Const(0.0, Ty.FLOAT)
        if not factors:
            return _number(c, Ty.FLOAT) or n.binary("*", Const(float(c), Ty.FLOAT), Const(1.0, Ty.FLOAT))
        num = [f for p, f in factors if p == 1]
        den = [f for p, f in factors if p == -1]
        magnitude = abs(c)
        if magnitude != 1 and not _exact(magnitude) and _exact(1 / magnitude):
            den.append(Const(float(1 / magnitude), Ty.FLOAT))
        elif magnitude != 1:
            num.insert(0, Const(float(magnitude if num or den else c), Ty.FLOAT))
            if not (num[1:] or den):
                return num[0]
        result = _chain("*", num) if num else Const(1.0, Ty.FLOAT)
        for d in den:
            result = n.binary("/", result, d)
        result = as_type(result, Ty.FLOAT)
        if c < 0:
            if isinstance(result, Binary) and isinstance(result.a, Const) and result.op == "*":
                return Binary("*", Const(-float(result.a.value), Ty.FLOAT), result.b, Ty.FLOAT)
            return n.unary("-", result)
        return result


def _constant_choice(kept: list[tuple[int, Expr]], total: Fraction | int, ty: Ty) -> Expr | None:
    """k + (a if c else b) with constants k, a, b as one choice of constants, (k + a if c else k + b)."""
    if len(kept) != 1:
        return None
    sign, choice = kept[0]
    if not (isinstance(choice, IfExp) and isinstance(choice.a, Const) and isinstance(choice.b, Const)):
        return None
    ends = [_number(total + sign * (Fraction(x.value) if ty is Ty.FLOAT else int(x.value)), ty)
            for x in (choice.a, choice.b)]
    a, b = ends
    return n.if_exp(choice.cond, a, b) if a is not None and b is not None else None


def _zero(x: Expr) -> bool:
    return isinstance(x, Const) and x.ty is not Ty.BOOL and x.value == 0


def _one(x: Expr) -> bool:
    return isinstance(x, Const) and x.ty is not Ty.BOOL and x.value == 1


def _number(total: Fraction | int, ty: Ty) -> Const | None:
    if ty is Ty.FLOAT:
        value = float(total) if -(2**1000) < total < 2**1000 else math.inf
        return Const(value, ty) if math.isfinite(value) else None
    return Const(int(total), ty) if INT32_MIN < int(total) <= INT32_MAX else None


def _times(k: int, term: Expr) -> Expr:
    """k copies of term added (x + x is 2.0 * x, exactly)."""
    if k == 1:
        return term
    return n.binary("*", Const(float(k), Ty.FLOAT) if term.ty is Ty.FLOAT else Const(k, Ty.INT), term)


def _chain(op: str, items: list[Expr]) -> Expr:
    result = items[0]
    for item in items[1:]:
        result = n.binary(op, result, item)
    return result


def _rebuild_sum(terms: list[tuple[int, Expr]], ty: Ty) -> Expr:
    if not terms:
        return Const(0.0 if ty is Ty.FLOAT else 0, ty)
    start = next((i for i, (sign, _) in enumerate(terms) if sign > 0), 0)
    terms = [terms[start], *terms[:start], *terms[start + 1:]]
    sign, first = terms[0]
    result = first if sign > 0 else n.unary("-", first)
    for sign, term in terms[1:]:
        if isinstance(term, Const) and term.value < 0:
            sign, term = -sign, Const(-term.value, term.ty)
        result = n.binary("+" if sign > 0 else "-", result, term)
    return result


