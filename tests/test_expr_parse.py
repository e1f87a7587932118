"""The variant language's parser: what it accepts, what it refuses and how it says so, canonical text."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.errors import SpecError
from attngen.expr import (
    BoolOp,
    Compare,
    Const,
    ExprError,
    ScalarDecl,
    TensorDecl,
    Ty,
    Unary,
    Var,
    canonical,
    evaluate,
    free_names,
    indexed_by_range,
    parse,
    tensors_used,
    uses_score,
)
from attngen.expr.parse import MAX_DEPTH, MAX_SOURCE
from tests.test_expr_gen import SCALARS, TENSORS, Skip, int64_safe, mask_source, oracle, random_tensors, score_source

DOC = {"doc": TensorDecl("int32", ("batch", "seqlen_q"))}
BIAS = {"bias": TensorDecl("fp32", ("heads", 1024))}


def mask(source: str, **kw: object) -> object:
    return parse(source, role="mask", **kw)  # type: ignore[arg-type]


def mod(source: str, **kw: object) -> object:
    return parse(source, role="score_mod", **kw)  # type: ignore[arg-type]


# ---- accepted ---------------------------------------------------------------------------------
GOOD = [
    ("mask", "kv_idx <= q_idx + sk - sq and (q_idx + sk - sq - kv_idx <= 1024 or kv_idx < 4)", {}),
    ("mask", "doc[b, q_idx] == doc[b, kv_idx] and kv_idx <= q_idx", {"tensors": DOC}),
    ("score_mod", "score + bias[h, min(abs(q_idx - kv_idx), 1023)]", {"tensors": BIAS}),
    ("score_mod", "50.0 * tanh(score / 50.0)", {}),
    ("mask", "(q_idx + sk - sq) // 128 == kv_idx // 128", {}),
    ("mask", "0 <= kv_idx < q_idx + 1 <= sk", {}),
    ("mask", "(q_idx < 4) == (kv_idx < 4)", {}),
    ("mask", "True", {}),
    ("mask", "not (kv_idx > q_idx) if h % 2 == 0 else kv_idx <= q_idx + 3", {}),
    ("score_mod", "q_idx - kv_idx", {}),
    ("score_mod", "score * alpha + n", {"scalars": {"alpha": ScalarDecl("fp32"), "n": ScalarDecl("int32")}}),
    ("score_mod", "max(score, -1e4, floor(score))", {}),
    ("score_mod", "sigmoid(score) ** 2 + exp(-score) - log(1 + sqrt(score * score))", {}),
    ("score_mod", "+score - -score", {}),
    ("mask", "kv_idx <= q_idx # a comment", {}),
    ("mask", "kv_idx <=\n    q_idx", {}),
    ("mask", "  kv_idx <= q_idx  ", {}),
    ("mask", "0x10 > kv_idx", {}),
    ("mask", "-2147483647 < kv_idx", {}),
]


@pytest.mark.parametrize(("role", "source", "decls"), GOOD)
def test_accepts(role: str, source: str, decls: dict) -> None:
    expr = parse(source, role=role, **decls)  # type: ignore[arg-type]
    assert (expr.ty is Ty.BOOL) == (role == "mask")
    assert parse(canonical(expr), role=role, **decls) == expr  # type: ignore[arg-type]


def test_types_follow_python() -> None:
    assert mod("q_idx // 2").ty is Ty.INT
    assert mod("q_idx / 2").ty is Ty.FLOAT
    assert mod("q_idx ** 2").ty is Ty.FLOAT
    assert mod("floor(score)").ty is Ty.INT
    assert mod("abs(q_idx)").ty is Ty.INT
    assert mod("min(q_idx, 2.5)").ty is Ty.FLOAT
    assert mod("exp(q_idx)").ty is Ty.FLOAT
    assert mod("q_idx if score > 0 else 1.0").ty is Ty.FLOAT
    assert mod("+q_idx") == Var("q_idx", Ty.INT)
    assert mod("-3") == Const(-3, Ty.INT)
    assert mod("-(3)") == Const(-3, Ty.INT)
    assert mod("--3") == mod("-(-3)") == Const(3, Ty.INT)
    assert mod("-(-0)") == Const(0, Ty.INT) and canonical(mod("-(-0.0)")) == "0.0"
    assert mod("--score") == Unary("-", Unary("-", Var("score", Ty.FLOAT), Ty.FLOAT), Ty.FLOAT)


def test_chained_comparisons_are_conjunctions() -> None:
    chained = mask("0 <= kv_idx < q_idx")
    assert isinstance(chained, BoolOp) and chained.op == "and"
    assert chained == mask("0 <= kv_idx and kv_idx < q_idx")
    assert isinstance(chained.items[0], Compare)
    assert mask("q_idx < 1 and (kv_idx < 2 and h < 3)") == mask("q_idx < 1 and kv_idx < 2 and h < 3")


def test_helpers() -> None:
    e = mod("score + bias[h, min(abs(q_idx - kv_idx), 1023)] * alpha", tensors=BIAS,
            scalars={"alpha": ScalarDecl("fp32")})
    assert free_names(e) == {"score", "h", "q_idx", "kv_idx", "alpha"}
    assert tensors_used(e) == {"bias"}
    assert uses_score(e) and not uses_score(mod("q_idx * 1.0"))
    assert indexed_by_range(e, "bias", ("q_idx", "kv_idx"))
    assert not indexed_by_range(mask("doc[b, 0] > kv_idx", tensors=DOC), "doc", ("q_idx", "kv_idx"))


# ---- refused, with where and why ------------------------------------------------------------------
BAD = [
    # (role, source, decls, line, column, needles)
    ("mask", "q_idx.real > 0", {}, 1, 1, ["attribute access", "allowed:"]),
    ("mask", "kv_idx <= q_idx + (kv_idx < 3)", {}, 1, 20, ["'kv_idx < 3'", "boolean", "'+' needs a number"]),
    ("mask", "kv_idx <= q_idx and 3", {}, 1, 21, ["int value", "'and' needs a boolean"]),
    ("mask", "q_idx + 1", {}, 1, 1, ["int value as the whole mask", "compare it"]),
    ("score_mod", "score > 0", {}, 1, 1, ["boolean as the whole score_mod", "x if cond else y"]),
    ("mask", "score > 0", {}, 1, 1, ["'score' in a mask", "only in a score_mod"]),
    ("mask", "foo < q_idx", {}, 1, 1, ["unknown name 'foo'", "declare 'foo'"]),
    ("mask", "kv_idx < 3 if q_idx else 4", {}, 1, 15, ["int value where the condition", "needs a boolean"]),
    ("mask", "(kv_idx if q_idx > 0 else kv_idx < 2)", {}, 1, 27, ["branch", "both"]),
    ("mask", "q_idx & kv_idx", {}, 1, 1, ["bitwise operator '&'", "'and'"]),
    ("mask", "~q_idx > 0", {}, 1, 1, ["bitwise operator '~'", "'not'"]),
    ("mask", "q_idx is kv_idx", {}, 1, 1, ["operator 'is'", "=="]),
    ("mask", "q_idx in kv_idx", {}, 1, 1, ["operator 'in'"]),
    ("mask", "q_idx < 'a'", {}, 1, 9, ["a string"]),
    ("mask", "q_idx < None", {}, 1, 9, ["None"]),
    ("mask", "q_idx < 1j", {}, 1, 9, ["complex number"]),
    ("mask", "q_idx < b'x'", {}, 1, 9, ["bytes"]),
    ("mask", "q_idx < 2147483648", {}, 1, 9, ["integer 2147483648", "|x| < 2**31"]),
    ("mask", "q_idx < -2147483648", {}, 1, 10, ["integer -2147483648"]),
    ("mask", "q_idx < 1e400", {}, 1, 9, ["not finite"]),
    ("mask", "q_idx < (1, 2)", {}, 1, 9, ["a tuple"]),
    ("mask", "q_idx < [1]", {}, 1, 9, ["a list"]),
    ("mask", "q_idx < f'{q_idx}'", {}, 1, 9, ["f-string"]),
    ("mask", "(x := 1) > q_idx", {}, 1, 2, ["assignment expression"]),
    ("mask", "min(*q_idx) > 1", {}, 1, 5, ["starred"]),
    ("mask", "min(q_idx, key=kv_idx) > 1", {}, 1, 16, ["keyword argument"]),
    ("mask", "min(q_idx) > 1", {}, 1, 1, ["min() with 1 argument", "at least 2"]),
    ("mask", "abs(q_idx, kv_idx) > 1", {}, 1, 1, ["abs() with 2", "exactly 1"]),
    ("mask", "pow(q_idx, 2) > 1", {}, 1, 1, ["call 'pow'(...)", "calls of min, max"]),
    ("mask", "min > 1", {}, 1, 1, ["function 'min' without a call"]),
    ("mask", "q_idx[0] > 1", {}, 1, 1, ["indexing of 'q_idx'", "not a declared tensor"]),
    ("mask", "doc > 1", {"tensors": DOC}, 1, 1, ["tensor 'doc' without an index", "doc[i0, i1]"]),
    ("mask", "doc[b] > 1", {"tensors": DOC}, 1, 1, ["1 index(es) for 'doc'", "exactly 2"]),
    ("mask", "doc[b, 1:2] > 1", {"tensors": DOC}, 1, 8, ["a slice"]),
    ("mask", "doc[b, q_idx / 2] > 1", {"tensors": DOC}, 1, 8, ["float index", "floor(x)"]),
    ("mask", "doc[b, q_idx < 2] > 1", {"tensors": DOC}, 1, 8, ["bool index"]),
    ("mask", "kv_idx <= q_idx +", {}, 1, 18, ["invalid syntax", "balanced"]),
    ("mask", "kv_idx <= (q_idx", {}, 1, 11, ["invalid syntax"]),
    ("mask", "q_idx) < (kv_idx", {}, 1, 6, ["invalid syntax"]),
    ("mask", "kv_idx <= q_idx and\n  kv_idx >= q_idx.x", {}, 2, 13, ["attribute access"]),
    ("mask", "kv_idx <= q_idx and\n  kv_idx >= 'é' + q_idx", {}, 2, 13, ["a string"]),
    ("mask", "'é' < 1 or kv_idx.y", {}, 1, 1, ["a string"]),
    ("mask", "'é' if kv_idx.y else 1", {}, 1, 8, ["attribute access"]),
    ("mask", "kv_idx <= q_idx and\n\tq_idx >", {}, 2, 9, ["invalid syntax"]),
    ("mask", "lambda: 1", {}, 1, 1, ["a lambda"]),
    ("mask", "[x for x in q_idx]", {}, 1, 1, ["comprehension"]),
    ("mask", "", {}, None, None, ["empty"]),
    ("mask", "q_idx < 1; import os", {}, 1, 10, ["invalid syntax"]),
]


@pytest.mark.parametrize(("role", "source", "decls", "line", "column", "needles"), BAD)
def test_refuses(role: str, source: str, decls: dict, line: int | None, column: int | None,
                 needles: list[str]) -> None:
    with pytest.raises(ExprError) as caught:
        parse(source, role=role, **decls)  # type: ignore[arg-type]
    error = caught.value
    assert isinstance(error, SpecError) and isinstance(error, ValueError)
    assert (error.expr_line, error.expr_column) == (line, column), str(error)
    text = str(error)
    if line is not None:
        assert text.startswith(f"line {line}, column {column}: ")
    for needle in needles:
        assert needle in text, (needle, text)


SECURITY = [
    "__import__('os').system('true')", "().__class__.__bases__[0].__subclasses__()", "open('x').read()",
    "eval('1')", "exec('1')", "getattr(q_idx, 'real')", "(lambda: 1)()", "q_idx.__class__", "globals()",
    "[c for c in ().__class__.__mro__]", "__builtins__", "breakpoint()", "compile('1', 'x', 'eval')",
    "min.__self__", "(yield)", "await q_idx", "type(q_idx)", "q_idx if __debug__ else kv_idx",
]


@pytest.mark.parametrize("source", SECURITY)
def test_refuses_everything_outside_the_language(source: str) -> None:
    with pytest.raises(ExprError):
        parse(source, role="mask")


def test_limits_give_clean_errors() -> None:
    with pytest.raises(ExprError, match=f"at most {MAX_SOURCE}"):
        mask("q_idx < 1 or " * 400 + "True")
    deep = "(" * 70 + "q_idx" + ")" * 70 + " > 0"
    assert mask(deep) == mask("q_idx > 0")  # parentheses alone do not nest the tree
    for source in ["-" * 3000 + "q_idx > 0", "not " * 900 + "True", "abs(" * 70 + "q_idx" + ")" * 70 + " > 0",
                   "q_idx" + " + 1" * 100 + " > 0", "(" * 1000 + "q_idx" + ")" * 1000 + " > 0"]:
        with pytest.raises(ExprError) as caught:
            mask(source)
        assert "nest" in str(caught.value) or "syntax" in str(caught.value), str(caught.value)[:200]
    with pytest.raises(ExprError, match="null bytes|cannot be read|syntax"):
        mask("q_idx\x00 > 1")
    with pytest.raises(ExprError, match="must be a string"):
        mask(b"q_idx > 1")  # type: ignore[arg-type]
    assert mask("abs(" * (MAX_DEPTH - 3) + "q_idx" + ")" * (MAX_DEPTH - 3) + " > 0").ty is Ty.BOOL


def test_declarations_are_checked() -> None:
    with pytest.raises(ExprError, match="dtype 'int64'"):
        TensorDecl("int64", ("batch",))
    with pytest.raises(ExprError, match="'seq'"):
        TensorDecl("int32", ("batch", "seq"))
    with pytest.raises(ExprError, match="positive"):
        TensorDecl("int32", (0,))
    with pytest.raises(ExprError, match="1 to 4 dims"):
        TensorDecl("int32", ())
    with pytest.raises(ExprError):
        TensorDecl("int32", (True,))  # type: ignore[arg-type]
    with pytest.raises(ExprError, match="dtype 'fp16'"):
        ScalarDecl("fp16")
    assert TensorDecl("bf16", ["heads", 8]).shape == ("heads", 8)  # type: ignore[arg-type]
    with pytest.raises(ExprError, match="shadows"):
        mask("q_idx > 0", tensors={"min": TensorDecl("int32", ("batch",))})
    with pytest.raises(ExprError, match="shadows"):
        mask("q_idx > 0", scalars={"score": ScalarDecl("fp32")})
    with pytest.raises(ExprError, match="both as a tensor and as a scalar"):
        mask("q_idx > 0", tensors={"x": TensorDecl("int32", ("batch",))}, scalars={"x": ScalarDecl("fp32")})
    with pytest.raises(ExprError, match="not usable"):
        mask("q_idx > 0", scalars={"1x": ScalarDecl("fp32")})
    with pytest.raises(ExprError, match="role"):
        parse("q_idx > 0", role="other")  # type: ignore[arg-type]


# ---- canonical text ---------------------------------------------------------------------------
SAME = [
    ("mask", "kv_idx<=q_idx+sk-sq", "((kv_idx) <= ((q_idx + sk) - sq))", "kv_idx <= q_idx + sk - sq"),
    ("mask", "A and (B or C)", "(A) and ((B) or (C))", "h < 1 and (b < 2 or sk > 3)"),
    ("mask", "(A and B) and C", "A and (B and C)", "h < 1 and b < 2 and sk > 3"),
    ("score_mod", "-X ** 2", "-(X ** 2)", "-q_idx ** 2"),
    ("score_mod", "(-X) ** 2", "(-X)**2", "(-q_idx) ** 2"),
    ("score_mod", "X ** Y ** 2", "X ** (Y ** 2)", "q_idx ** kv_idx ** 2"),
    ("score_mod", "(X ** Y) ** 2", "((X ** Y)) ** 2", "(q_idx ** kv_idx) ** 2"),
    ("score_mod", "X - (Y - 1)", "X-(Y-1)", "q_idx - (kv_idx - 1)"),
    ("score_mod", "(X - Y) - 1", "X - Y - 1", "q_idx - kv_idx - 1"),
    ("score_mod", "X if A else (Y if B else 1)", "X if A else Y if B else 1",
     "q_idx if h < 1 else kv_idx if b < 2 else 1"),
    ("score_mod", "(X if A else Y) if B else 1", "((X if A else Y)) if B else 1",
     "(q_idx if h < 1 else kv_idx) if b < 2 else 1"),
    ("score_mod", "(-3) ** 2", "(-3)**2", "(-3) ** 2"),
    ("score_mod", "X * -1.5", "X*(-1.5)", "q_idx * -1.5"),
    ("mask", "not (A)", "not A", "not h < 1"),
    ("mask", "(not A) == B", "((not A)) == (B)", "(not h < 1) == (b < 2)"),
    ("score_mod", "min(X,Y)", "min( X , Y )", "min(q_idx, kv_idx)"),
    ("score_mod", "1e3 + X", "1000.0 + X", "1000.0 + q_idx"),
    ("score_mod", "0.1 + X", "0.10 + X", "0.1 + q_idx"),
    ("mask", "0 < X < 3", "0 < X and X < 3", "0 < q_idx and q_idx < 3"),
    ("mask", "(X < 1) == (Y < 2) == (h < 3)", "((X < 1) == (Y < 2)) and ((Y < 2) == (h < 3))",
     "(q_idx < 1) == (kv_idx < 2) and (kv_idx < 2) == (h < 3)"),
]
_SUB = {"X": "q_idx", "Y": "kv_idx", "A": "(h < 1)", "B": "(b < 2)", "C": "(sk > 3)"}


def _spell(text: str) -> str:
    return "".join(_SUB.get(ch, ch) for ch in text)


@pytest.mark.parametrize(("role", "one", "two", "expected"), SAME)
def test_canonical_is_one_spelling(role: str, one: str, two: str, expected: str) -> None:
    first, second = parse(_spell(one), role=role), parse(_spell(two), role=role)  # type: ignore[arg-type]
    assert first == second
    assert canonical(first) == canonical(second) == expected
    assert parse(canonical(first), role=role) == first  # type: ignore[arg-type]


def test_canonical_keeps_meaningful_differences() -> None:
    assert canonical(mod("score * 2")) != canonical(mod("score * 2.0"))
    assert canonical(mod("(score + 1) + 2")) != canonical(mod("score + (1 + 2)"))
    either = mask("q_idx < 1 or kv_idx < 1 and h < 1")
    assert canonical(either) != canonical(mask("(q_idx < 1 or kv_idx < 1) and h < 1"))


# ---- fuzzing ----------------------------------------------------------------------------------
TOKENS = ["q_idx", "kv_idx", "score", "doc", "w", "alpha", "(", ")", "[", "]", ",", "+", "-", "*", "/", "//", "%",
          "**", "<", "<=", "==", "!=", "and", "or", "not", "if", "else", "min", "abs", "exp", "1", "2.5", "1e999",
          "True", "None", "'s'", ".", "lambda", ":", "=", ":=", "*", "\n", " ", "\\", "#", "9" * 30, "__class__",
          "__import__", "~", "&", "is", "in", "for", "j", "\x00", "é", "\t", "{", "}"]


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=60), st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join),
                 st.lists(st.sampled_from(TOKENS), max_size=25).map("".join)),
       st.sampled_from(["mask", "score_mod"]))
def test_any_text_parses_or_raises_expr_error(text: str, role: str) -> None:
    try:
        expr = parse(text, role=role, tensors=TENSORS, scalars=SCALARS)  # type: ignore[arg-type]
    except ExprError as error:
        assert str(error)
        return
    assert parse(canonical(expr), role=role, tensors=TENSORS, scalars=SCALARS) == expr  # type: ignore[arg-type]


def _points(rng: np.random.Generator, n: int, score: bool) -> list[dict]:
    points = []
    for _ in range(n):
        sq, sk = (int(x) for x in rng.integers(1, 60, 2))
        point = {"b": int(rng.integers(0, 3)), "h": int(rng.integers(0, 4)), "q_idx": int(rng.integers(-2, sq + 2)),
                 "kv_idx": int(rng.integers(-2, sk + 2)), "sq": sq, "sk": sk, "k0": int(rng.integers(-5, 9)),
                 "alpha": float(rng.normal() * 3)}
        if score:
            point["score"] = float(rng.normal() * 4)
        points.append(point)
    return points


def _check_against_oracle(source: str, role: str, seed: int) -> None:
    expr = parse(source, role=role, tensors=TENSORS, scalars=SCALARS)  # type: ignore[arg-type]
    text = canonical(expr)
    assert parse(text, role=role, tensors=TENSORS, scalars=SCALARS) == expr  # type: ignore[arg-type]
    assert canonical(parse(text, role=role, tensors=TENSORS, scalars=SCALARS)) == text  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    tensors = random_tensors(rng)
    points = _points(rng, 12, role == "score_mod")
    env = {k: np.array([p[k] for p in points]) for k in points[0] if k not in ("k0", "alpha")}
    scalars = {"k0": np.array([p["k0"] for p in points]), "alpha": np.array([p["alpha"] for p in points])}
    got = evaluate(expr, env, tensors, scalars)  # type: ignore[arg-type]
    got = np.broadcast_to(got, (len(points),))
    for i, point in enumerate(points):
        try:
            want = oracle(source, point, tensors)
        except Skip:
            continue
        if not int64_safe(expr, point, tensors):
            continue
        if expr.ty is Ty.FLOAT:
            want = float(want)
            assert np.isnan(got[i]) == np.isnan(want), (source, point, got[i], want)
            if not np.isnan(want):
                assert got[i] == pytest.approx(want, rel=1e-9, abs=1e-12), (source, point, got[i], want)
        else:
            assert got[i] == want, (source, point, got[i], want)


@settings(max_examples=250)
@given(st.randoms(use_true_random=False), st.integers(0, 2**16), st.booleans())
def test_generated_masks_roundtrip_and_match_python(rng: random.Random, seed: int, floats: bool) -> None:
    _check_against_oracle(mask_source(rng, depth=4, floats=floats), "mask", seed)


@settings(max_examples=250)
@given(st.randoms(use_true_random=False), st.integers(0, 2**16))
def test_generated_score_mods_roundtrip_and_match_python(rng: random.Random, seed: int) -> None:
    _check_against_oracle(score_source(rng, depth=4), "score_mod", seed)
