"""C++ (CUDA device code, or host C++ for tests) of an expression: one C++ expression computing its value.

Calling convention. `names` maps each name the expression reads to a C++ expression: the built-in names
(`b, h, q_idx, kv_idx, sq, sk`, C++ int), `score` (float) and each declared scalar (int or float, for
example `p.var_<name>`). A tensor read `t[i, j]` is emitted as `tensor_t(P, i, j)`, where P is `params`
("p" by default): an accessor the kernel defines, which clamps the indices and returns int (int32
tensors) or float. The helpers `ag_*` come from templates/features/expr_prelude.cuh.

INT values are C++ `int` unless a range analysis over the names' domains (indices and lengths in
[0, 2**24], b and h in [0, 65535], int scalars and tensor values int32) cannot prove that a subexpression
fits in 32 bits: then it is computed in `long long`. FLOAT values are `float`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ExprError
from .interval import BoolBounds, Bounder, Interval
from .nodes import (
    INT32_MAX,
    INT32_MIN,
    Binary,
    BoolOp,
    Call,
    Compare,
    Const,
    Expr,
    IfExp,
    Not,
    TensorRef,
    Ty,
    Unary,
    Var,
    walk,
)

#: The domain of each built-in name, for the int / long long decision.
DOMAIN: dict[str, Interval] = {
    "q_idx": Interval(0, 2**24), "kv_idx": Interval(0, 2**24), "sq": Interval(0, 2**24), "sk": Interval(0, 2**24),
    "b": Interval(0, 65535), "h": Interval(0, 65535),
}
INT, LL, FLOAT, BOOL = "int", "long long", "float", "bool"
FLT_MAX = 3.4028234663852886e38


def emit(expr: Expr, names: Mapping[str, str], *, params: str = "p",
         domain: Mapping[str, Interval] | None = None) -> str:
    """One C++ expression computing `expr` (see the module's calling convention)."""
    return Emitter(expr, names, params, domain).code(expr)


def wider(*ctypes: str) -> str:
    if FLOAT in ctypes:
        return FLOAT
    return LL if LL in ctypes else INT


def cast(code: str, source: str, target: str) -> str:
    if source == target or (source == BOOL and target == BOOL):
        return code
    return f"(({target}){code})"


def literal(value: int | float | bool, ctype: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if ctype == FLOAT:
        value = float(value)
        if abs(value) > FLT_MAX:
            return "(-AG_INF)" if value < 0 else "AG_INF"
        text = repr(value)
        text = text if ("." in text or "e" in text) else text + ".0"
        return f"({text}f)" if value < 0 else f"{text}f"
    text = str(int(value)) + ("LL" if ctype == LL else "")
    return f"({text})" if value < 0 else text


class Types:
    """The C++ type of every node of one tree: int where the domain analysis proves 32 bits suffice."""

    def __init__(self, expr: Expr, domain: Mapping[str, Interval] | None = None) -> None:
        env: dict[str, Interval | int | float] = dict(DOMAIN if domain is None else domain)
        for node in walk(expr):
            if isinstance(node, Var) and node.ty is Ty.INT and node.name not in env:
                env[node.name] = Interval(INT32_MIN, INT32_MAX)
        self.bounder = Bounder(env, None)
        self.bounder.of(expr)

    def of(self, e: Expr) -> str:
        if e.ty is Ty.FLOAT:
            return FLOAT
        if e.ty is Ty.BOOL:
            return BOOL
        found = self.bounder.of(e)
        assert isinstance(found, Interval) and not isinstance(found, BoolBounds)
        return INT if found.lo >= INT32_MIN and found.hi <= INT32_MAX else LL

    def operation(self, e: Expr, *operands: Expr) -> str:
        """The type an operation is computed in: wide enough for its result and its operands."""
        return wider(self.of(e), *(self.of(x) for x in operands))


class Emitter:
    """C++ value expressions for the nodes of one tree."""

    def __init__(self, root: Expr, names: Mapping[str, str], params: str = "p",
                 domain: Mapping[str, Interval] | None = None, types: Types | None = None) -> None:
        self.names = names
        self.params = params
        self.types = types or Types(root, domain)

    def typed(self, e: Expr, target: str) -> str:
        return cast(self.code(e), self.types.of(e), target)

    def code(self, e: Expr) -> str:
        t = self.types.of(e)
        if isinstance(e, Const):
            return literal(e.value, t)
        if isinstance(e, Var):
            if e.name not in self.names:
                raise ExprError(f"no C++ spelling for the name '{e.name}'; add it to names")
            return self.names[e.name]
        if isinstance(e, TensorRef):
            args = ", ".join([self.params, *(self.code(i) for i in e.indices)])
            return f"tensor_{e.name}({args})"
        if isinstance(e, Unary):
            op_t = self.types.operation(e, e.x)
            return cast(f"(-{self.typed(e.x, op_t)})", op_t, t)
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, Compare):
            return self.compare(e)
        if isinstance(e, BoolOp):
            return "(" + (" && " if e.op == "and" else " || ").join(self.code(x) for x in e.items) + ")"
        if isinstance(e, Not):
            return f"(!{self.code(e.x)})"
        if isinstance(e, IfExp):
            return f"({self.code(e.cond)} ? {self.typed(e.a, t)} : {self.typed(e.b, t)})"
        return self.call(e)

    def binary(self, e: Binary) -> str:
        t = self.types.of(e)
        if e.op in ("/", "**"):
            a, b = self.typed(e.a, FLOAT), self.typed(e.b, FLOAT)
            if e.op == "/":
                return f"ag_fdiv({a}, {b})"
            if isinstance(e.b, Const) and e.b.value == 2:
                return f"ag_sq({a})"
            return f"ag_pow({a}, {b})"
        op_t = self.types.operation(e, e.a, e.b)
        a, b = self.typed(e.a, op_t), self.typed(e.b, op_t)
        if e.op == "//":
            text = f"ag_floordiv({a}, {b})"
        elif e.op == "%":
            text = f"ag_mod({a}, {b})"
        else:
            text = f"({a} {e.op} {b})"
        return cast(text, op_t, t)

    def compare(self, e: Compare) -> str:
        if e.a.ty is Ty.BOOL:
            return f"({self.code(e.a)} {e.op} {self.code(e.b)})"
        op_t = wider(self.types.of(e.a), self.types.of(e.b))
        return f"({self.typed(e.a, op_t)} {e.op} {self.typed(e.b, op_t)})"

    def call(self, e: Call) -> str:
        t = self.types.of(e)
        if e.fn in ("min", "max"):
            op_t = self.types.operation(e, *e.args)
            text = self.typed(e.args[0], op_t)
            for arg in e.args[1:]:
                text = f"ag_{e.fn}({text}, {self.typed(arg, op_t)})"
            return cast(text, op_t, t)
        (x,) = e.args
        if e.fn == "abs":
            op_t = self.types.operation(e, x)
            return cast(f"ag_abs({self.typed(x, op_t)})", op_t, t)
        if e.fn == "floor":
            return self.code(x) if x.ty is Ty.INT else f"ag_floor({self.typed(x, FLOAT)})"
        return f"ag_{e.fn}({self.typed(x, FLOAT)})"

