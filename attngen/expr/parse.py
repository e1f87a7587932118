"""Source text -> typed expression tree, by a whitelist over Python's `ast` (nothing is ever evaluated).

Every refusal is an ExprError saying where (line and column inside the expression), what was found,
what is allowed there, and what to do instead.
"""

from __future__ import annotations

import ast
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Literal, NoReturn

from . import nodes as n
from .decls import FUNCTIONS, INDEX_NAMES, RESERVED, SCORE, ScalarDecl, TensorDecl
from .errors import ExprError
from .nodes import Expr, Ty

MAX_SOURCE = 4096
MAX_DEPTH = 64
INT_LIMIT = 2**31

Role = Literal["mask", "score_mod"]
_NO_TENSORS: Mapping[str, TensorDecl] = MappingProxyType({})
_NO_SCALARS: Mapping[str, ScalarDecl] = MappingProxyType({})

_BINOPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                            ast.Mod: "%", ast.Pow: "**"}
_CMPOPS: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_BITOPS: dict[type, str] = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<",
                            ast.RShift: ">>", ast.MatMult: "@"}
_FUNCS = ", ".join(FUNCTIONS)
#: What each refused kind of syntax is called, and what to write instead.
_REFUSED: dict[type, tuple[str, str]] = {
    ast.Attribute: ("attribute access", "attributes are not part of the language; use the names and functions "
                                        "listed"),
    ast.Lambda: ("a lambda", "write the expression itself"),
    ast.ListComp: ("a comprehension", "write min(...)/max(...) over explicit arguments"),
    ast.SetComp: ("a comprehension", "write min(...)/max(...) over explicit arguments"),
    ast.DictComp: ("a comprehension", "write min(...)/max(...) over explicit arguments"),
    ast.GeneratorExp: ("a generator expression", "write min(...)/max(...) over explicit arguments"),
    ast.JoinedStr: ("an f-string", "strings are not values of the language"),
    ast.FormattedValue: ("an f-string", "strings are not values of the language"),
    ast.NamedExpr: ("an assignment expression ':='", "write the value where it is used"),
    ast.Starred: ("a starred expression", "pass each argument explicitly"),
    ast.List: ("a list", "an expression computes one number or boolean"),
    ast.Tuple: ("a tuple", "an expression computes one number or boolean"),
    ast.Set: ("a set", "an expression computes one number or boolean"),
    ast.Dict: ("a dict", "an expression computes one number or boolean"),
    ast.Await: ("'await'", "write the expression itself"),
    ast.Yield: ("'yield'", "write the expression itself"),
    ast.YieldFrom: ("'yield from'", "write the expression itself"),
    ast.Slice: ("a slice", "index each dim of a tensor with one int expression: t[i, j]"),
}


def allowed_text(role: Role) -> str:
    score = ", score" if role == "score_mod" else ""
    return (f"names b, h, q_idx, kv_idx, sq, sk{score}, declared tensors t[i, ...] and scalars, int and float "
            f"literals, True/False, + - * / // % **, < <= > >= == !=, and/or/not, 'x if c else y', and calls of "
            f"{_FUNCS}")


def parse(source: str, *, role: Role, tensors: Mapping[str, TensorDecl] = _NO_TENSORS,
          scalars: Mapping[str, ScalarDecl] = _NO_SCALARS) -> Expr:
    """Parse and type-check `source`; a mask must be boolean, a score mod a number."""
    if role not in ("mask", "score_mod"):
        raise ExprError(f"role {role!r} is not one of 'mask', 'score_mod'")
    _check_declarations(tensors, scalars)
    tree, shift = _syntax(source)
    converter = _Converter(source, shift, role, tensors, scalars)
    expr = converter.expr(tree.body, 1)
    if role == "mask" and expr.ty is not Ty.BOOL:
        converter.fail(tree.body, f"a{'n int' if expr.ty is Ty.INT else ' float'} value as the whole mask",
                       "a boolean expression", "compare it, for example 'kv_idx <= q_idx + sk - sq'")
    if role == "score_mod" and expr.ty is Ty.BOOL:
        converter.fail(tree.body, "a boolean as the whole score_mod", "a number (float or int)",
                       "choose between values with 'x if cond else y'")
    return expr


def _check_declarations(tensors: Mapping[str, TensorDecl], scalars: Mapping[str, ScalarDecl]) -> None:
    for kind, decls, cls in (("tensor", tensors, TensorDecl), ("scalar", scalars, ScalarDecl)):
        for name, decl in decls.items():
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
                raise ExprError(f"{kind} name {name!r} is not usable; use letters, digits and '_', not starting "
                                "with a digit or '__'")
            if name in RESERVED:
                raise ExprError(f"{kind} name {name!r} shadows a built-in name or function of the language; "
                                "rename the declaration")
            if not isinstance(decl, cls):
                raise ExprError(f"{kind} {name!r} must be declared with a {cls.__name__}, got {type(decl).__name__}")
    both = sorted(set(tensors) & set(scalars))
    if both:
        raise ExprError(f"{both[0]!r} is declared both as a tensor and as a scalar; keep one")


def _syntax(source: str) -> tuple[ast.Expression, int]:
    """The Python syntax tree and how many lines were prepended (a multi-line expression is parsed inside
    parentheses, so that a YAML block can break lines anywhere)."""
    if not isinstance(source, str):
        raise ExprError(f"an expression must be a string, got {type(source).__name__}")
    if len(source) > MAX_SOURCE:
        raise ExprError(f"the expression has {len(source)} characters; at most {MAX_SOURCE} are allowed; "
                        "split it or use a tensor for the data it spells out")
    if not source.strip():
        raise ExprError("the expression is empty; write a mask or score mod, for example 'kv_idx <= q_idx'")
    try:
        return _ast_parse(source), 0
    except SyntaxError as error:
        first = error
    shift = 0
    if _balanced(source):
        try:
            return _ast_parse("(\n" + source + "\n)"), 1
        except SyntaxError as error:
            if "\n" in source:  # the error inside the parentheses is the one a multi-line text has
                first, shift = error, 1
    lines = source.split("\n")
    line = min(max((first.lineno or 1) - shift, 1), len(lines))
    beyond = (first.lineno or 1) - shift > len(lines)
    text = lines[line - 1]
    column = first.offset if first.offset and 0 < first.offset <= len(text) + 1 and not beyond else len(text) + 1
    raise ExprError(f"invalid syntax ({first.msg}); allowed: a Python-style expression of the language; check the "
                    "operators and that parentheses and brackets are balanced", expr_line=line, expr_column=column)


def _ast_parse(text: str) -> ast.Expression:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text, mode="eval")
    except (RecursionError, MemoryError):
        raise ExprError(f"the expression nests too deeply; at most {MAX_DEPTH} levels are allowed; flatten it, "
                        "for example with min(a, b, c) or a tensor") from None
    except SyntaxError:
        raise
    except (ValueError, OverflowError) as error:  # null bytes, unencodable text
        raise ExprError(f"the expression cannot be read ({error}); write it in plain text") from None


def _balanced(source: str) -> bool:
    level = 0
    for ch in source:
        level += (ch in "([{") - (ch in ")]}")
        if level < 0:
            return False
    return level == 0


class _Converter:
    def __init__(self, source: str, shift: int, role: Role, tensors: Mapping[str, TensorDecl],
                 scalars: Mapping[str, ScalarDecl]) -> None:
        self.lines = source.split("\n")
        self.shift = shift
        self.role = role
        self.tensors = tensors
        self.scalars = scalars
        self.handlers: dict[type, Callable[[ast.AST, int], Expr]] = {
            ast.Constant: self._constant, ast.Name: self._name, ast.UnaryOp: self._unary, ast.BinOp: self._binop,
            ast.BoolOp: self._boolop, ast.Compare: self._compare, ast.IfExp: self._ifexp, ast.Call: self._call,
            ast.Subscript: self._subscript,
        }

    # ---- errors ----
    def where(self, node: ast.AST) -> tuple[int, int]:
        line = max(1, getattr(node, "lineno", 1 + self.shift) - self.shift)
        offset = getattr(node, "col_offset", 0)
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        column = len(text.encode("utf-8", "surrogatepass")[:offset].decode("utf-8", "replace")) + 1
        return line, column

    def fail(self, node: ast.AST, found: str, allowed: str | None = None, remedy: str = "") -> NoReturn:
        line, column = self.where(node)
        message = f"found {found}; allowed: {allowed or allowed_text(self.role)}"
        raise ExprError(message + (f"; {remedy}" if remedy else ""), expr_line=line, expr_column=column)

    def snippet(self, node: ast.AST) -> str:
        try:
            text = ast.unparse(node)
        except Exception:  # an unparseable fragment: name its kind only
            return type(node).__name__
        return f"'{text if len(text) <= 40 else text[:37] + '...'}'"

    def typed(self, build: Callable[[], Expr], operands: Sequence[ast.AST]) -> Expr:
        try:
            return build()
        except n.TypeRuleError as error:
            at = operands[error.operand] if error.operand is not None else operands[0]
            self.fail(at, f"{self.snippet(at)}, {error}", "numbers in arithmetic, booleans in and/or/not and "
                      "conditions", "compare numbers to get a boolean, or choose values with 'x if c else y'")

    # ---- nodes ----
    def expr(self, node: ast.AST, depth: int) -> Expr:
        if depth > MAX_DEPTH:
            self.fail(node, f"nesting deeper than {MAX_DEPTH} levels", f"at most {MAX_DEPTH} levels",
                      "flatten it, for example with min(a, b, c) or a tensor")
        handler = self.handlers.get(type(node))
        if handler is None:
            found, remedy = _REFUSED.get(type(node), (f"unsupported syntax ({type(node).__name__})", ""))
            self.fail(node, f"{found} {self.snippet(node)}", remedy=remedy)
        return handler(node, depth)

    def _constant(self, node: ast.AST, depth: int, negate: bool = False) -> Expr:
        assert isinstance(node, ast.Constant)
        value = node.value
        if isinstance(value, bool):
            return n.const(value)
        if isinstance(value, int):
            value = -value if negate else value
            if abs(value) >= INT_LIMIT:
                self.fail(node, f"the integer {value}", "integers with |x| < 2**31",
                          "use a float literal or a smaller value")
            return n.const(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                self.fail(node, f"the float literal {self.snippet(node)} (not finite)", "finite float literals")
            return n.const(-value if negate else value)
        kind = {str: "a string", bytes: "bytes", complex: "a complex number", type(None): "None"}.get(
            type(value), "an unsupported constant")
        self.fail(node, f"{kind} {self.snippet(node)}", "int and float literals, True and False")

    def _name(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.Name)
        name = node.id
        if name in INDEX_NAMES:
            return n.Var(name, Ty.INT)
        if name == SCORE:
            if self.role != "score_mod":
                self.fail(node, "'score' in a mask", "b, h, q_idx, kv_idx, sq, sk, declared tensors and scalars",
                          "'score' exists only in a score_mod")
            return n.Var(name, Ty.FLOAT)
        if name in self.scalars:
            return n.Var(name, self.scalars[name].ty)
        if name in self.tensors:
            dims = ", ".join("i" + str(k) for k in range(len(self.tensors[name].shape)))
            self.fail(node, f"the tensor '{name}' without an index", f"indexed reads {name}[{dims}]",
                      "give one int index per declared dim")
        if name in FUNCTIONS:
            self.fail(node, f"the function '{name}' without a call", f"calls such as {name}(x)")
        self.fail(node, f"the unknown name '{name}'", allowed_text(self.role),
                  f"declare '{name}' under tensors or scalars, or use a built-in name")

    def _unary(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.UnaryOp)
        operand = node.operand
        if isinstance(node.op, ast.Not):
            x = self.expr(operand, depth + 1)
            return self.typed(lambda: n.not_(x), [operand])
        if isinstance(node.op, ast.Invert):
            self.fail(node, "the bitwise operator '~'", "unary - and +, and 'not' for booleans", "use 'not'")
        if (isinstance(node.op, ast.USub) and isinstance(operand, ast.Constant)
                and type(operand.value) in (int, float)):
            return self._constant(operand, depth + 1, negate=True)
        x = self.expr(operand, depth + 1)
        op = "-" if isinstance(node.op, ast.USub) else "+"
        if op == "-" and isinstance(x, n.Const) and x.ty is not Ty.BOOL:  # -(-3) is the literal 3
            return n.const(-x.value)
        return self.typed(lambda: n.unary(op, x), [operand])

    def _binop(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.BinOp)
        if type(node.op) in _BITOPS:
            self.fail(node, f"the bitwise operator '{_BITOPS[type(node.op)]}'",
                      "+ - * / // % ** on numbers, and/or/not on booleans", "use 'and', 'or', 'not' for booleans")
        a, b = self.expr(node.left, depth + 1), self.expr(node.right, depth + 1)
        op = _BINOPS[type(node.op)]
        return self.typed(lambda: n.binary(op, a, b), [node.left, node.right])

    def _boolop(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.BoolOp)
        items = [self.expr(v, depth + 1) for v in node.values]
        op = "and" if isinstance(node.op, ast.And) else "or"
        return self.typed(lambda: n.bool_op(op, items), node.values)

    def _compare(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.Compare)
        operands = [node.left, *node.comparators]
        for op in node.ops:
            if type(op) not in _CMPOPS:
                word = {ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}.get(type(op), "?")
                self.fail(node, f"the operator '{word}'", "< <= > >= == !=", "compare values with == or !=")
        values = [self.expr(x, depth + 1) for x in operands]
        pairs: list[Expr] = []
        for i, op in enumerate(node.ops):
            pairs.append(self.typed(partial(n.compare, _CMPOPS[type(op)], values[i], values[i + 1]),
                                    operands[i:i + 2]))
        return pairs[0] if len(pairs) == 1 else n.bool_op("and", pairs)

    def _ifexp(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.IfExp)
        parts = [node.test, node.body, node.orelse]
        c, a, b = (self.expr(x, depth + 1) for x in parts)
        return self.typed(lambda: n.if_exp(c, a, b), parts)

    def _call(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.Call)
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            self.fail(node, f"the call {self.snippet(func)}(...)", f"calls of {_FUNCS}",
                      "only these functions exist in the language")
        if node.keywords:
            self.fail(node.keywords[0].value, "a keyword argument", "positional arguments", "drop the keyword")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.fail(arg, "a starred argument", "positional arguments", "pass each argument explicitly")
        fewest, most = FUNCTIONS[func.id]
        if len(node.args) < fewest or (most is not None and len(node.args) > most):
            count = f"exactly {fewest}" if fewest == most else f"at least {fewest}"
            self.fail(node, f"{func.id}() with {len(node.args)} argument(s)", f"{func.id}() with {count}")
        args = [self.expr(a, depth + 1) for a in node.args]
        return self.typed(lambda: n.call(func.id, args), node.args)

    def _subscript(self, node: ast.AST, depth: int) -> Expr:
        assert isinstance(node, ast.Subscript)
        base = node.value
        if not isinstance(base, ast.Name) or base.id not in self.tensors:
            what = f"'{base.id}'" if isinstance(base, ast.Name) else self.snippet(base)
            self.fail(node, f"indexing of {what}, which is not a declared tensor", "indexing of declared tensors",
                      "declare the tensor under 'tensors' with its dtype and shape")
        decl = self.tensors[base.id]
        parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(parts) != len(decl.shape):
            self.fail(node, f"{len(parts)} index(es) for '{base.id}'",
                      f"exactly {len(decl.shape)} (its shape is [{', '.join(map(str, decl.shape))}])")
        indices = [self.expr(p, depth + 1) for p in parts]
        for part, index in zip(parts, indices, strict=True):
            if index.ty is not Ty.INT:
                self.fail(part, f"a {index.ty.value} index {self.snippet(part)}", "int index expressions",
                          "round a float index with floor(x)")
        return n.TensorRef(base.id, tuple(indices), decl.ty)
