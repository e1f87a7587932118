"""C++ that bounds an expression over a tile: the GPU side of the tile classifier.

`emit_classify(mask, names, q=(lo, hi), kv=(lo, hi))` gives C++ statements that end in `return 0;`
(empty: no element visible), `return 1;` (partial) or `return 2;` (full), for the tile whose q_idx and
kv_idx lie in the inclusive ranges named by the C++ expressions q and kv (int). Every other name is a point,
spelled by `names` as for `emit`. A tensor read whose indices range over the tile calls
`tensor_bounds_<name>(P, lo0, hi0, lo1, hi1, ...)` (one lo/hi pair per dim, long long, unclamped), which
returns an AgIRange (int32 tensors) or AgFRange (float tensors) covering every element of the box; a read
at a point calls `tensor_<name>(P, i0, ...)` as `emit` does.

The arithmetic mirrors attngen.expr.interval (INT ranges are exact the same way); FLOAT ranges go through
the prelude's ag_fv_* helpers. Subexpressions that do not depend on q_idx or kv_idx are computed once,
exactly; INT ranges are `int` wherever the domain analysis allows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .cxx import FLOAT, INT, LL, Emitter, Types, cast, literal
from .errors import ExprError
from .interval import Interval
from .nodes import Binary, BoolOp, Call, Compare, Const, Expr, IfExp, Not, TensorRef, Ty, Unary, Var, children

_ATOM = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_.]*|[0-9.]+[A-Za-z]*|\([-0-9.]+[A-Za-z]*\)|true|false)$")
_CMP_CODES = {"<": 0, "<=": 1, ">": 2, ">=": 3, "==": 4, "!=": 5}
RANGED = ("q_idx", "kv_idx")


@dataclass(frozen=True)
class IRange:
    lo: str
    hi: str
    ctype: str


@dataclass(frozen=True)
class Bools:
    may_false: str
    may_true: str


def emit_bounds(expr: Expr, names: Mapping[str, str], *, q: tuple[str, str], kv: tuple[str, str],
                params: str = "p", domain: Mapping[str, Interval] | None = None) -> tuple[list[str], str]:
    """C++ statements bounding `expr` over the tile, and the name of the variable they leave the result in:
    an AgBools (BOOL), AgIRange (INT) or AgFRange (FLOAT)."""
    out = BoundsEmitter(expr, names, q, kv, params, domain)
    if expr.ty is Ty.BOOL:
        r = out.bools(expr)
        return out.lines, out.let("AgBools", f"AgBools{{{r.may_false}, {r.may_true}}}")
    if expr.ty is Ty.INT:
        i = out.irange(expr)
        return out.lines, out.let("AgIRange", f"AgIRange{{{cast(i.lo, i.ctype, LL)}, {cast(i.hi, i.ctype, LL)}}}")
    return out.lines, out.frange(expr)


def emit_classify(mask: Expr, names: Mapping[str, str], *, q: tuple[str, str], kv: tuple[str, str],
                  params: str = "p", domain: Mapping[str, Interval] | None = None, indent: int = 0) -> str:
    """The body of `int classify(...)`: statements ending in return 0 (empty), 1 (partial) or 2 (full)."""
    if mask.ty is not Ty.BOOL:
        raise ExprError("only a boolean expression (a mask) classifies tiles")
    out = BoundsEmitter(mask, names, q, kv, params, domain)
    r = out.bools(mask)
    lines = [*out.lines, f"return !{r.may_true} ? 0 : (!{r.may_false} ? 2 : 1);"]
    return "\n".join(" " * indent + line for line in lines)


class BoundsEmitter:
    def __init__(self, root: Expr, names: Mapping[str, str], q: tuple[str, str], kv: tuple[str, str],
                 params: str, domain: Mapping[str, Interval] | None) -> None:
        self.types = Types(root, domain)
        self.values = Emitter(root, names, params, types=self.types)
        self.ranges = {"q_idx": IRange(q[0], q[1], INT), "kv_idx": IRange(kv[0], kv[1], INT)}
        self.params = params
        self.lines: list[str] = []
        #: Keyed by the node's value: equal subexpressions are bounded once.
        self.memo: dict[Expr, IRange | Bools | str] = {}
        self.dependent: set[int] = set()
        self._mark(root)

    def _mark(self, e: Expr) -> bool:
        found = isinstance(e, Var) and e.name in RANGED
        for child in children(e):
            found = self._mark(child) or found
        if found:
            self.dependent.add(id(e))
        return found

    def let(self, ctype: str, value: str) -> str:
        name = f"ag_b{len(self.lines)}"
        self.lines.append(f"const {ctype} {name} = {value};")
        return name

    def atom(self, ctype: str, code: str) -> str:
        return code if _ATOM.match(code) else self.let(ctype, code)

    def result(self, e: Expr) -> IRange | Bools | str:
        hit = self.memo.get(e)
        if hit is None:
            hit = self._compute(e) if id(e) in self.dependent else self._point(e)
            self.memo[e] = hit
        return hit

    def _point(self, e: Expr) -> IRange | Bools | str:
        code = self.values.code(e)
        if e.ty is Ty.BOOL:
            value = self.atom("bool", code)
            return Bools(f"(!{value})", value)
        if e.ty is Ty.FLOAT:
            return self.let("AgFRange", f"ag_fv_point({code})")
        value = self.atom(self.types.of(e), code)
        return IRange(value, value, self.types.of(e))

    # ---- typed views ----
    def irange(self, e: Expr) -> IRange:
        r = self.result(e)
        assert isinstance(r, IRange)
        return r

    def bools(self, e: Expr) -> Bools:
        r = self.result(e)
        assert isinstance(r, Bools)
        return r

    def frange(self, e: Expr) -> str:
        r = self.result(e)
        if isinstance(r, IRange):
            lo, hi = self.ends(r, FLOAT)
            return self.let("AgFRange", f"AgFRange{{{lo}, {hi}, false}}")
        assert isinstance(r, str)
        return r

    def int_result(self, e: Expr, lo: str, hi: str, op_t: str) -> IRange:
        t = self.types.of(e)
        return IRange(self.let(t, cast(lo, op_t, t)), self.let(t, cast(hi, op_t, t)), t)

    def ends(self, r: IRange, op_t: str) -> tuple[str, str]:
        return cast(r.lo, r.ctype, op_t), cast(r.hi, r.ctype, op_t)

    # ---- nodes that depend on the tile ----
    def _compute(self, e: Expr) -> IRange | Bools | str:
        if isinstance(e, Var):
            return self.ranges[e.name]
        if isinstance(e, TensorRef):
            return self._tensor(e)
        if isinstance(e, Unary):
            if e.ty is Ty.FLOAT:
                return self.let("AgFRange", f"ag_fv_neg({self.frange(e.x)})")
            op_t = self.types.operation(e, e.x)
            lo, hi = self.ends(self.irange(e.x), op_t)
            return self.int_result(e, f"(-{hi})", f"(-{lo})", op_t)
        if isinstance(e, Binary):
            return self._int_binary(e) if e.ty is Ty.INT else self._float_binary(e)
        if isinstance(e, Compare):
            return self._compare(e)
        if isinstance(e, BoolOp):
            items = [self.bools(x) for x in e.items]
            t = (" && " if e.op == "and" else " || ").join(i.may_true for i in items)
            f = (" || " if e.op == "and" else " && ").join(i.may_false for i in items)
            return Bools(self.let("bool", f), self.let("bool", t))
        if isinstance(e, Not):
            x = self.bools(e.x)
            return Bools(x.may_true, x.may_false)
        if isinstance(e, IfExp):
            return self._ifexp(e)
        assert isinstance(e, Call)
        return self._call(e)

    def _tensor(self, e: TensorRef) -> IRange | str:
        args = [self.params]
        for index in e.indices:
            r = self.irange(index)
            args += [r.lo, r.hi]
        call = f"tensor_bounds_{e.name}({', '.join(args)})"
        if e.ty is Ty.FLOAT:
            return self.let("AgFRange", call)
        found = self.let("AgIRange", call)
        return self.int_result(e, f"{found}.lo", f"{found}.hi", LL)

    def _int_binary(self, e: Binary) -> IRange:
        op_t = self.types.operation(e, e.a, e.b)
        al, ah = self.ends(self.irange(e.a), op_t)
        bl, bh = self.ends(self.irange(e.b), op_t)
        c = e.b.value if isinstance(e.b, Const) else None
        if e.op == "+":
            return self.int_result(e, f"({al} + {bl})", f"({ah} + {bh})", op_t)
        if e.op == "-":
            return self.int_result(e, f"({al} - {bh})", f"({ah} - {bl})", op_t)
        if e.op == "*":
            if c is not None:
                lo, hi = f"({al} * {bl})", f"({ah} * {bl})"
                return self.int_result(e, *((lo, hi) if c >= 0 else (hi, lo)), op_t)
            if isinstance(e.a, Const):
                lo, hi = f"({al} * {bl})", f"({al} * {bh})"
                return self.int_result(e, *((lo, hi) if e.a.value >= 0 else (hi, lo)), op_t)
            corners = [self.let(op_t, f"{x} * {y}") for x in (al, ah) for y in (bl, bh)]
            lo = f"ag_min(ag_min({corners[0]}, {corners[1]}), ag_min({corners[2]}, {corners[3]}))"
            hi = f"ag_max(ag_max({corners[0]}, {corners[1]}), ag_max({corners[2]}, {corners[3]}))"
            return self.int_result(e, lo, hi, op_t)
        if c is not None and c == 0:
            return self.int_result(e, "0", "0", INT)
        if c is not None:
            return self._by_constant(e, int(c), al, ah, op_t)
        helper = "ag_iv_floordiv" if e.op == "//" else "ag_iv_mod"
        args = ", ".join(cast(x, op_t, LL) for x in (al, ah, bl, bh))
        r = self.let("AgIRange", f"{helper}({args})")
        return self.int_result(e, f"{r}.lo", f"{r}.hi", LL)

    def _by_constant(self, e: Binary, c: int, al: str, ah: str, op_t: str) -> IRange:
        k = literal(c, op_t)
        if e.op == "//":
            lo, hi = f"ag_floordiv({al}, {k})", f"ag_floordiv({ah}, {k})"
            return self.int_result(e, *((lo, hi) if c > 0 else (hi, lo)), op_t)
        same = self.let("bool", f"ag_floordiv({al}, {k}) == ag_floordiv({ah}, {k})")
        low, high = (0, c - 1) if c > 0 else (c + 1, 0)
        return self.int_result(e, f"({same} ? ag_mod({al}, {k}) : {literal(low, op_t)})",
                               f"({same} ? ag_mod({ah}, {k}) : {literal(high, op_t)})", op_t)

    def _float_binary(self, e: Binary) -> str:
        name = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow"}[e.op]
        return self.let("AgFRange", f"ag_fv_{name}({self.frange(e.a)}, {self.frange(e.b)})")

    def _compare(self, e: Compare) -> Bools:
        if e.a.ty is Ty.BOOL:
            a, b = self.bools(e.a), self.bools(e.b)
            same = self.let("bool", f"({a.may_true} && {b.may_true}) || ({a.may_false} && {b.may_false})")
            differ = self.let("bool", f"({a.may_true} && {b.may_false}) || ({a.may_false} && {b.may_true})")
            return Bools(differ, same) if e.op == "==" else Bools(same, differ)
        if Ty.FLOAT in (e.a.ty, e.b.ty):
            r = self.let("AgBools", f"ag_fv_cmp({_CMP_CODES[e.op]}, {self.frange(e.a)}, {self.frange(e.b)})")
            return Bools(f"{r}.may_false", f"{r}.may_true")
        op_t = LL if LL in (self.types.of(e.a), self.types.of(e.b)) else INT
        (al, ah), (bl, bh) = self.ends(self.irange(e.a), op_t), self.ends(self.irange(e.b), op_t)
        op = e.op
        if op in (">", ">="):
            (al, ah), (bl, bh), op = (bl, bh), (al, ah), "<" if op == ">" else "<="
        if op in ("<", "<="):
            t = f"{al} {op} {bh}"
            f = f"{ah} {'>=' if op == '<' else '>'} {bl}"
        else:
            t = f"{al} <= {bh} && {bl} <= {ah}"
            f = f"!({al} == {ah} && {ah} == {bl} && {bl} == {bh})"
            if op == "!=":
                t, f = f, t
        return Bools(self.let("bool", f), self.let("bool", t))

    def _ifexp(self, e: IfExp) -> IRange | Bools | str:
        c = self.bools(e.cond)
        if e.ty is Ty.BOOL:
            a, b = self.bools(e.a), self.bools(e.b)
            pick = [f"(!{c.may_false} ? {x} : (!{c.may_true} ? {y} : ({x} || {y})))"
                    for x, y in ((a.may_false, b.may_false), (a.may_true, b.may_true))]
            return Bools(self.let("bool", pick[0]), self.let("bool", pick[1]))
        if e.ty is Ty.FLOAT:
            return self.let("AgFRange", f"ag_fv_select({c.may_false}, {c.may_true}, {self.frange(e.a)}, "
                                        f"{self.frange(e.b)})")
        op_t = self.types.operation(e, e.a, e.b)
        (al, ah), (bl, bh) = self.ends(self.irange(e.a), op_t), self.ends(self.irange(e.b), op_t)
        lo = f"(!{c.may_false} ? {al} : (!{c.may_true} ? {bl} : ag_min({al}, {bl})))"
        hi = f"(!{c.may_false} ? {ah} : (!{c.may_true} ? {bh} : ag_max({ah}, {bh})))"
        return self.int_result(e, lo, hi, op_t)

    def _call(self, e: Call) -> IRange | str:
        if e.ty is Ty.FLOAT:
            if e.fn in ("min", "max"):
                text = self.frange(e.args[0])
                for arg in e.args[1:]:
                    text = f"ag_fv_{e.fn}({text}, {self.frange(arg)})"
                return self.let("AgFRange", text)
            return self.let("AgFRange", f"ag_fv_{e.fn}({self.frange(e.args[0])})")
        if e.fn == "floor":
            (x,) = e.args
            if x.ty is Ty.INT:
                return self.irange(x)
            r = self.let("AgIRange", f"ag_fv_floor({self.frange(x)})")
            return self.int_result(e, f"{r}.lo", f"{r}.hi", LL)
        op_t = self.types.operation(e, *e.args)
        ends = [self.ends(self.irange(a), op_t) for a in e.args]
        if e.fn == "abs":
            ((lo, hi),) = ends
            return self.int_result(e, f"({lo} >= 0 ? {lo} : ({hi} <= 0 ? -{hi} : 0))",
                                   f"({lo} >= 0 ? {hi} : ({hi} <= 0 ? -{lo} : ag_max(-{lo}, {hi})))", op_t)
        low, high = ends[0]
        for lo, hi in ends[1:]:
            low, high = f"ag_{e.fn}({low}, {lo})", f"ag_{e.fn}({high}, {hi})"
        return self.int_result(e, low, high, op_t)
