"""The expression tree: frozen, hashable dataclasses, each carrying its type `ty`.

The typed constructors (`unary`, `binary`, `compare`, ...) apply the language's typing rules and raise
`TypeRuleError` (the parser turns it into an ExprError at the offending node).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum


class Ty(Enum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"


@dataclass(frozen=True)
class Const:
    value: int | float | bool
    ty: Ty


@dataclass(frozen=True)
class Var:
    name: str
    ty: Ty


@dataclass(frozen=True)
class TensorRef:
    name: str
    indices: tuple[Expr, ...]
    ty: Ty


@dataclass(frozen=True)
class Unary:
    op: str  # "-"
    x: Expr
    ty: Ty


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / // % **
    a: Expr
    b: Expr
    ty: Ty


@dataclass(frozen=True)
class Compare:
    op: str  # < <= > >= == !=
    a: Expr
    b: Expr
    ty: Ty = Ty.BOOL


@dataclass(frozen=True)
class BoolOp:
    op: str  # and, or
    items: tuple[Expr, ...]
    ty: Ty = Ty.BOOL


@dataclass(frozen=True)
class Not:
    x: Expr
    ty: Ty = Ty.BOOL


@dataclass(frozen=True)
class IfExp:
    cond: Expr
    a: Expr
    b: Expr
    ty: Ty


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple[Expr, ...]
    ty: Ty


Expr = Const | Var | TensorRef | Unary | Binary | Compare | BoolOp | Not | IfExp | Call

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "**")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
FLOAT_FUNCTIONS = ("exp", "log", "tanh", "sigmoid", "sqrt")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class TypeRuleError(Exception):
    """A typing rule is broken; `operand` is the index of the offending operand (None: the node itself)."""

    def __init__(self, message: str, operand: int | None = None) -> None:
        super().__init__(message)
        self.operand = operand


# ---- typed constructors ---------------------------------------------------------------------
def const(value: int | float | bool) -> Const:
    if isinstance(value, bool):
        return Const(value, Ty.BOOL)
    if isinstance(value, int):
        return Const(int(value), Ty.INT)
    return Const(float(value), Ty.FLOAT)


def _number(x: Expr, what: str, operand: int) -> None:
    if x.ty is Ty.BOOL:
        raise TypeRuleError(f"a boolean where {what} needs a number (bools are not numbers)", operand)


def _boolean(x: Expr, what: str, operand: int) -> None:
    if x.ty is not Ty.BOOL:
        raise TypeRuleError(f"a{'n int' if x.ty is Ty.INT else ' float'} value where {what} needs a boolean",
                            operand)


def promote(*tys: Ty) -> Ty:
    return Ty.FLOAT if Ty.FLOAT in tys else Ty.INT


def unary(op: str, x: Expr) -> Expr:
    _number(x, f"unary '{op}'", 0)
    return x if op == "+" else Unary(op, x, x.ty)


def binary(op: str, a: Expr, b: Expr) -> Binary:
    _number(a, f"'{op}'", 0)
    _number(b, f"'{op}'", 1)
    ty = Ty.FLOAT if op in ("/", "**") else promote(a.ty, b.ty)
    return Binary(op, a, b, ty)


def compare(op: str, a: Expr, b: Expr) -> Compare:
    if op in ("==", "!=") and a.ty is Ty.BOOL and b.ty is Ty.BOOL:
        return Compare(op, a, b)
    _number(a, f"'{op}'" + ("" if op in ("==", "!=") else " (ordering)"), 0)
    _number(b, f"'{op}'" + ("" if op in ("==", "!=") else " (ordering)"), 1)
    return Compare(op, a, b)


def bool_op(op: str, items: Sequence[Expr]) -> BoolOp:
    flat: list[Expr] = []
    for i, item in enumerate(items):
        _boolean(item, f"'{op}'", i)
        flat.extend(item.items if isinstance(item, BoolOp) and item.op == op else (item,))
    return BoolOp(op, tuple(flat))


def not_(x: Expr) -> Not:
    _boolean(x, "'not'", 0)
    return Not(x)


def if_exp(cond: Expr, a: Expr, b: Expr) -> IfExp:
    _boolean(cond, "the condition of 'x if c else y'", 0)
    if (a.ty is Ty.BOOL) != (b.ty is Ty.BOOL):
        raise TypeRuleError("a branch of 'x if c else y' whose type does not match the other (both must be "
                            "booleans or both numbers)", 1 if a.ty is Ty.BOOL else 2)
    return IfExp(cond, a, b, Ty.BOOL if a.ty is Ty.BOOL else promote(a.ty, b.ty))


def call(fn: str, args: Sequence[Expr]) -> Call:
    for i, arg in enumerate(args):
        _number(arg, f"{fn}()", i)
    if fn in FLOAT_FUNCTIONS:
        ty = Ty.FLOAT
    elif fn == "floor":
        ty = Ty.INT
    else:
        ty = promote(*(a.ty for a in args))
    return Call(fn, tuple(args), ty)


# ---- walking --------------------------------------------------------------------------------
def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Const, Var)):
        return ()
    if isinstance(e, TensorRef):
        return e.indices
    if isinstance(e, (Unary, Not)):
        return (e.x,)
    if isinstance(e, (Binary, Compare)):
        return (e.a, e.b)
    if isinstance(e, BoolOp):
        return e.items
    if isinstance(e, IfExp):
        return (e.cond, e.a, e.b)
    return e.args


def walk(e: Expr) -> Iterator[Expr]:
    """Every node, parents before children (iterative: no recursion limit)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def free_names(e: Expr) -> frozenset[str]:
    """The Var names the expression reads (built-in names, `score` and declared scalars)."""
    return frozenset(n.name for n in walk(e) if isinstance(n, Var))


def tensors_used(e: Expr) -> frozenset[str]:
    return frozenset(n.name for n in walk(e) if isinstance(n, TensorRef))


def depends_on(e: Expr, name: str) -> bool:
    """Whether the value can change with the Var `name` (through any subexpression, indices included)."""
    return any(isinstance(n, Var) and n.name == name for n in walk(e))


def uses_score(e: Expr) -> bool:
    return depends_on(e, "score")


def indexed_by_range(e: Expr, tensor: str, names: Sequence[str]) -> bool:
    """Whether some read of `tensor` has an index that depends on one of `names`."""
    return any(isinstance(n, TensorRef) and n.name == tensor and
               any(depends_on(i, name) for i in n.indices for name in names) for n in walk(e))


def depth(e: Expr) -> int:
    kids = children(e)
    return 1 + max((depth(k) for k in kids), default=0)
