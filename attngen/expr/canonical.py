"""One deterministic text per expression tree: `parse(canonical(e)) == e`.

Spacing is normalized, only the parentheses the tree needs are written, floats are spelled with `repr`,
chained comparisons are spelled as their conjunction and a unary `+` disappears. Used in cache keys and
kernel names.
"""

from __future__ import annotations

from .nodes import BoolOp, Call, Compare, Const, Expr, IfExp, Not, TensorRef, Unary, Var, children

# Python's precedence levels, lowest first.
_IF, _OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY, _POW, _ATOM = range(1, 11)
_BINARY_LEVEL = {"+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "//": _MUL, "%": _MUL, "**": _POW}


def canonical(expr: Expr) -> str:
    return _text(expr)[0]


def _level(expr: Expr) -> int:
    if isinstance(expr, Const):
        return _UNARY if not isinstance(expr.value, bool) and expr.value < 0 else _ATOM
    if isinstance(expr, (Var, TensorRef, Call)):
        return _ATOM
    if isinstance(expr, Unary):
        return _UNARY
    if isinstance(expr, BoolOp):
        return _AND if expr.op == "and" else _OR
    if isinstance(expr, Not):
        return _NOT
    if isinstance(expr, Compare):
        return _CMP
    if isinstance(expr, IfExp):
        return _IF
    return _BINARY_LEVEL[expr.op]


def _wrap(expr: Expr, at_least: int) -> str:
    text, level = _text(expr)
    return f"({text})" if level < at_least else text


def _const(value: int | float | bool) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _text(expr: Expr) -> tuple[str, int]:
    level = _level(expr)
    if isinstance(expr, Const):
        return _const(expr.value), level
    if isinstance(expr, Var):
        return expr.name, level
    if isinstance(expr, TensorRef):
        return f"{expr.name}[{', '.join(_text(i)[0] for i in expr.indices)}]", level
    if isinstance(expr, Call):
        return f"{expr.fn}({', '.join(_text(a)[0] for a in expr.args)})", level
    if isinstance(expr, Unary):
        return expr.op + _wrap(expr.x, _UNARY), level
    if isinstance(expr, Not):
        return "not " + _wrap(expr.x, _NOT), level
    if isinstance(expr, BoolOp):
        return f" {expr.op} ".join(_wrap(item, level + 1) for item in expr.items), level
    if isinstance(expr, Compare):
        return f"{_wrap(expr.a, _CMP + 1)} {expr.op} {_wrap(expr.b, _CMP + 1)}", level
    if isinstance(expr, IfExp):
        return f"{_wrap(expr.a, _OR)} if {_wrap(expr.cond, _OR)} else {_wrap(expr.b, _IF)}", level
    a, b = children(expr)
    if expr.op == "**":  # right-associative; its base binds tighter than a unary minus
        return f"{_wrap(a, _ATOM)} ** {_wrap(b, _UNARY)}", level
    return f"{_wrap(a, level)} {expr.op} {_wrap(b, level + 1)}", level
