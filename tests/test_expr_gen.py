"""Random well-typed expressions of the variant language (source text), and a Python oracle for them.

`Gen(rng)` writes source text from the grammar, with random spacing and redundant parentheses. The same
text, being known-safe, is also evaluated by Python itself (`oracle`) with the functions bound to NumPy
equivalents: an independent reference for the parser and the NumPy evaluator. Shared by the other
test_expr_* modules; the tests here check the generator itself.
"""

from __future__ import annotations

import ast
import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.expr import ExprError, ScalarDecl, TensorDecl, Ty, parse
from attngen.expr.interval import Bounder, tensor_bounds_from_arrays

TENSORS = {"doc": TensorDecl("int32", ("batch", "seqlen_k")), "w": TensorDecl("fp32", ("heads", 16))}
SCALARS = {"alpha": ScalarDecl("fp32"), "k0": ScalarDecl("int32")}
INT_NAMES = ("b", "h", "q_idx", "kv_idx", "sq", "sk", "k0")
INT_LITERALS = ("0", "1", "2", "3", "7", "-1", "-4", "16", "(-3)")
FLOAT_LITERALS = ("0.5", "1.5", "-2.25", "3.0", "0.001", "100.0", "2.0", "1e-3")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")


class Gen:
    """Random source text of a given type. `floats=False`: INT and BOOL only (no float anywhere)."""

    def __init__(self, rng: random.Random, *, score: bool = False, floats: bool = True,
                 tensors: bool = True) -> None:
        self.rng = rng
        self.score = score
        self.floats = floats
        self.tensors = tensors

    def pick(self, options: tuple[str, ...] | list[str]) -> str:
        return options[self.rng.randrange(len(options))]

    def wrap(self, text: str) -> str:
        space = self.pick(("", " ", "  "))
        return f"({space}{text}{space})"

    def number(self, depth: int) -> str:
        return self.expr("float" if self.floats and self.rng.random() < 0.5 else "int", depth)

    def expr(self, ty: str, depth: int) -> str:
        if depth <= 0 or self.rng.random() < 0.2:
            text = self.leaf(ty)
            return self.wrap(text) if self.rng.random() < 0.1 else text
        return self.wrap(getattr(self, f"_{ty}")(depth - 1))

    def leaf(self, ty: str) -> str:
        if ty == "int":
            return self.pick(INT_NAMES + INT_LITERALS)
        if ty == "float":
            names = ("alpha",) + (("score", "score", "score") if self.score else ())
            return self.pick(names + FLOAT_LITERALS)
        if self.rng.random() < 0.15:
            return self.pick(("True", "False"))
        return self.wrap(f"{self.leaf('int')} {self.pick(COMPARE)} {self.leaf('int')}")

    def _int(self, d: int) -> str:
        kind = self.rng.randrange(8)
        if kind <= 2:
            return f"{self.expr('int', d)} {self.pick(('+', '-', '*', '//', '%'))} {self.expr('int', d)}"
        if kind == 3:
            args = ", ".join(self.expr("int", d) for _ in range(self.rng.choice((2, 2, 3))))
            return f"{self.pick(('min', 'max'))}({args})"
        if kind == 4:
            return f"abs({self.expr('int', d)})" if self.rng.random() < 0.5 else f"floor({self.number(d)})"
        if kind == 5 and self.tensors:
            return f"doc[{self.expr('int', d)}, {self.expr('int', d)}]"
        if kind == 6:
            return f"{self.expr('int', d)} if {self.expr('bool', d)} else {self.expr('int', d)}"
        return f"-{self.expr('int', d)}"

    def _float(self, d: int) -> str:
        kind = self.rng.randrange(9)
        if kind <= 2:
            op = self.pick(("+", "-", "*", "/", "//", "%", "+", "*", "/"))
            left, right = self.number(d), self.number(d)
            if op not in ("/",):
                left = self.expr("float", d)
            return f"{left} {op} {right}"
        if kind == 3:
            exponent = self.pick(("2", "3", "0.5", "-1", "2.5")) if self.rng.random() < 0.7 else self.number(d)
            return f"{self.expr('float', d)} ** {exponent}"
        if kind == 4:
            return f"{self.pick(('exp', 'log', 'tanh', 'sigmoid', 'sqrt', 'abs'))}({self.number(d)})"
        if kind == 5:
            args = [self.expr("float", d)] + [self.number(d) for _ in range(self.rng.choice((1, 1, 2)))]
            self.rng.shuffle(args)
            return f"{self.pick(('min', 'max'))}({', '.join(args)})"
        if kind == 6 and self.tensors:
            return f"w[{self.expr('int', d)}, {self.expr('int', d)}]"
        if kind == 7:
            return f"{self.expr('float', d)} if {self.expr('bool', d)} else {self.number(d)}"
        return f"-{self.expr('float', d)}"

    def _bool(self, d: int) -> str:
        kind = self.rng.randrange(7)
        if kind <= 2:
            n = self.rng.choice((1, 1, 1, 2))
            parts = [self.number(d) if self.floats else self.expr("int", d) for _ in range(n + 1)]
            ops = [self.pick(COMPARE) for _ in range(n)]
            return " ".join(p for pair in zip(parts, [*ops, ""], strict=True) for p in pair).strip()
        if kind == 3:
            op = self.pick(("and", "or"))
            return f" {op} ".join(self.expr("bool", d) for _ in range(self.rng.choice((2, 2, 3))))
        if kind == 4:
            return f"not {self.expr('bool', d)}"
        if kind == 5:
            return f"{self.expr('bool', d)} {self.pick(('==', '!='))} {self.expr('bool', d)}"
        return f"{self.expr('bool', d)} if {self.expr('bool', d)} else {self.expr('bool', d)}"


def mask_source(rng: random.Random, depth: int = 3, **kw: Any) -> str:
    return Gen(rng, **kw).expr("bool", depth)


def score_source(rng: random.Random, depth: int = 3, **kw: Any) -> str:
    return Gen(rng, score=True, **kw).expr("float", depth)


# ---- the Python oracle ----------------------------------------------------------------------
class Clamped:
    """A tensor read as the language reads it: each index clamped into the shape."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __getitem__(self, index: tuple[int, ...]) -> int | float:
        if not isinstance(index, tuple):
            index = (index,)
        at = tuple(min(max(int(i), 0), n - 1) for i, n in zip(index, self.array.shape, strict=True))
        value = self.array[at]
        return int(value) if np.issubdtype(self.array.dtype, np.integer) else float(value)


def _floor(x: int | float) -> int:
    if isinstance(x, (int, np.integer)):
        return int(x)
    if math.isnan(x):
        return 0
    return int(min(max(np.floor(x), -(2**31)), 2**31 - 1))


ORACLE_FUNCTIONS = {
    "min": min, "max": max, "abs": abs, "floor": _floor,
    "exp": lambda x: np.exp(np.float64(x)), "log": lambda x: np.log(np.float64(x)),
    "tanh": lambda x: np.tanh(np.float64(x)), "sqrt": lambda x: np.sqrt(np.float64(x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-np.float64(x))),
}


class Skip(Exception):
    """The oracle has no value here (Python raises where the language defines one)."""


def _power(a: Any, b: Any) -> Any:
    value = a ** b
    if isinstance(value, complex):  # Python's ** of a negative base: no value in the language's sense
        raise Skip("complex")
    return value


class _PowerCalls(ast.NodeTransformer):
    """a ** b -> _power(a, b), so that no complex number reaches a comparison (NumPy would order it)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            return ast.copy_location(ast.Call(ast.Name("_power", ast.Load()), [node.left, node.right], []), node)
        return node


def oracle(source: str, point: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> Any:
    """Python's own value of a generated (known-safe) source at one point."""
    scope: dict[str, Any] = {"__builtins__": {}, "_power": _power}
    scope.update(ORACLE_FUNCTIONS)
    scope.update(point)
    scope.update({name: Clamped(a) for name, a in tensors.items()})
    try:
        with np.errstate(all="ignore"):
            tree = ast.fix_missing_locations(_PowerCalls().visit(ast.parse(source, mode="eval")))
            value = eval(compile(tree, "<generated>", "eval"), scope)  # noqa: S307 - generated, known-safe text
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as error:  # TypeError: a complex compared
        raise Skip(str(error)) from None
    if isinstance(value, complex):
        raise Skip("complex")
    return value


def int64_safe(expr: Any, point: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> bool:
    """Whether every INT subexpression at this point fits in int64 (NumPy wraps, Python does not)."""
    bounder = Bounder(dict(point), tensor_bounds_from_arrays(tensors))
    bounder.of(expr)
    for node, found in bounder.memo.values():
        if node.ty is Ty.INT and not (found.lo >= -(2**63) and found.hi < 2**63):
            return False
    return True


def random_tensors(rng: np.random.Generator, batch: int = 3, heads: int = 4, seqlen_k: int = 40) -> dict:
    return {"doc": np.sort(rng.integers(-2, 5, (batch, seqlen_k)), axis=1).astype(np.int32),
            "w": rng.normal(size=(heads, 16)).astype(np.float32)}


# ---- the generator's own checks ---------------------------------------------------------------
@settings(max_examples=200)
@given(st.randoms(use_true_random=False), st.sampled_from(["mask", "score_mod"]), st.booleans())
def test_generated_sources_parse_with_their_type(rng: random.Random, role: str, floats: bool) -> None:
    source = mask_source(rng, floats=floats) if role == "mask" else score_source(rng)
    expr = parse(source, role=role, tensors=TENSORS, scalars=SCALARS)
    assert (expr.ty is Ty.BOOL) == (role == "mask")


def test_generator_reaches_every_construct() -> None:
    rng = random.Random(7)
    text = " ".join(score_source(rng, depth=4) + mask_source(rng, depth=4) for _ in range(200))
    for needle in ("//", "%", "**", "min(", "max(", "abs(", "floor(", "exp(", "log(", "tanh(", "sigmoid(",
                   "sqrt(", "doc[", "w[", " if ", " and ", " or ", "not ", "==", "!=", "True", "score"):
        assert needle in text, needle


def test_oracle_refuses_what_python_cannot_compute() -> None:
    with pytest.raises(Skip):
        oracle("q_idx // 0", {"q_idx": 3}, {})
    with pytest.raises(ExprError):
        parse("q_idx // 0 < 1.5j", role="mask")
