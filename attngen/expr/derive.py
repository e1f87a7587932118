"""Symbolic derivatives (the backward of a score mod): d expr / d wrt, by the chain rule.

INT and BOOL subexpressions are piecewise constant: their derivative is 0 (`floor`, `//`, tensor reads
too). Comparisons are conditions: d(x if c else y) = (dx if c else dy), d abs(x) = (dx if x >= 0 else -dx),
d min/max follows the branch Python's min/max picks. The result is a FLOAT expression; `simplify` makes it
compact. Where a power's base is 0 or infinite, or the argument of sqrt or log is 0, the chain rule's
inf * 0 can make the value NaN (as in any automatic differentiation).
"""

from __future__ import annotations

from . import nodes as n
from .errors import ExprError
from .nodes import Binary, Call, Const, Expr, IfExp, TensorRef, Ty, Unary, Var, children

ZERO = Const(0.0, Ty.FLOAT)
ONE = Const(1.0, Ty.FLOAT)


def _is(x: Expr, value: float) -> bool:
    return isinstance(x, Const) and x.ty is not Ty.BOOL and x.value == value


# Constructors that drop the zeros and ones the chain rule produces (derivative terms are all FLOAT).
def add(a: Expr, b: Expr) -> Expr:
    if _is(a, 0) and b.ty is Ty.FLOAT:
        return b
    if _is(b, 0) and a.ty is Ty.FLOAT:
        return a
    return n.binary("+", a, b)


def sub(a: Expr, b: Expr) -> Expr:
    if _is(b, 0) and a.ty is Ty.FLOAT:
        return a
    if _is(a, 0) and b.ty is Ty.FLOAT:
        return neg(b)
    return n.binary("-", a, b)


def neg(x: Expr) -> Expr:
    if isinstance(x, Unary):
        return x.x
    if _is(x, 0):
        return x
    return n.unary("-", x)


def mul(a: Expr, b: Expr) -> Expr:
    if _is(a, 0) or _is(b, 0):
        return ZERO
    if _is(a, 1) and b.ty is Ty.FLOAT:
        return b
    if _is(b, 1) and a.ty is Ty.FLOAT:
        return a
    return n.binary("*", a, b)


def div(a: Expr, b: Expr) -> Expr:
    if _is(a, 0):
        return ZERO
    return a if _is(b, 1) and a.ty is Ty.FLOAT else n.binary("/", a, b)


def derivative(expr: Expr, wrt: str = "score") -> Expr:
    """d expr / d wrt (a FLOAT expression; 0.0 where expr does not depend on wrt)."""
    if expr.ty is Ty.BOOL:
        raise ExprError("a boolean expression has no derivative; differentiate a score mod (a number)")
    return _Deriver(expr, wrt).d(expr)


class _Deriver:
    def __init__(self, root: Expr, wrt: str) -> None:
        self.wrt = wrt
        self.dependent: set[int] = set()
        self.memo: dict[int, tuple[Expr, Expr]] = {}
        self._mark(root)

    def _mark(self, e: Expr) -> bool:
        found = isinstance(e, Var) and e.name == self.wrt
        for child in children(e):
            found = self._mark(child) or found
        if found:
            self.dependent.add(id(e))
        return found

    def d(self, e: Expr) -> Expr:
        if e.ty is not Ty.FLOAT or id(e) not in self.dependent:
            return ZERO
        hit = self.memo.get(id(e))
        if hit is None:
            hit = (e, self._rule(e))
            self.memo[id(e)] = hit
        return hit[1]

    def depends(self, e: Expr) -> bool:
        return id(e) in self.dependent

    def _rule(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return ONE
        if isinstance(e, (Const, TensorRef)):
            return ZERO
        if isinstance(e, Unary):
            return neg(self.d(e.x))
        if isinstance(e, IfExp):
            return n.if_exp(e.cond, self.d(e.a), self.d(e.b))
        if isinstance(e, Call):
            return self._call(e)
        if isinstance(e, Binary):
            return self._binary(e)
        return ZERO

    def _binary(self, e: Binary) -> Expr:
        a, b, da, db = e.a, e.b, self.d(e.a), self.d(e.b)
        if e.op == "+":
            return add(da, db)
        if e.op == "-":
            return sub(da, db)
        if e.op == "*":
            return add(mul(da, b), mul(a, db))
        if e.op == "/":
            return div(da, b) if not self.depends(b) else div(sub(da, mul(div(a, b), db)), b)
        if e.op == "%":  # a - b * floor(a / b)
            return sub(da, mul(db, n.binary("//", a, b)))
        if e.op == "**":
            return self._power(e, da, db)
        return ZERO  # //: piecewise constant

    def _power(self, e: Binary, da: Expr, db: Expr) -> Expr:
        a, b = e.a, e.b
        if not self.depends(b):
            less = n.const(b.value - 1) if isinstance(b, Const) else n.binary("-", b, n.const(1))
            return mul(mul(b, n.binary("**", a, less)), da)
        log_a = n.call("log", [a])
        if not self.depends(a):
            return mul(mul(e, log_a), db)
        return mul(e, add(mul(db, log_a), div(mul(b, da), a)))

    def _call(self, e: Call) -> Expr:
        if e.fn in ("min", "max"):
            # Python's min keeps the running value m unless x < m (max: x > m): a left fold of pairs.
            m, dm = e.args[0], self.d(e.args[0])
            for x in e.args[1:]:
                picked = n.compare("<" if e.fn == "min" else ">", x, m)
                dm = n.if_exp(picked, self.d(x), dm)
                m = n.call(e.fn, [m, x])
            return dm
        (x,) = e.args
        dx = self.d(x)
        if e.fn == "abs":
            return n.if_exp(n.compare(">=", x, n.const(0)), dx, neg(dx))
        if e.fn == "exp":
            return mul(e, dx)
        if e.fn == "log":
            return div(dx, x)
        if e.fn == "tanh":
            return mul(sub(ONE, n.binary("**", e, n.const(2))), dx)
        if e.fn == "sigmoid":
            return mul(mul(e, sub(ONE, e)), dx)
        if e.fn == "sqrt":
            return div(dx, mul(n.const(2.0), e))
        return ZERO  # floor
