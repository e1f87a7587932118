"""Derivatives with respect to `score` against central finite differences, and the simplifier."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.expr import (
    Binary,
    Call,
    Const,
    Expr,
    ExprError,
    TensorDecl,
    Ty,
    canonical,
    depends_on,
    derivative,
    evaluate,
    parse,
    simplify,
)
from attngen.expr.nodes import walk
from tests.test_expr_gen import SCALARS, TENSORS, random_tensors, score_source

MODS = {
    "softcap": "50.0 * tanh(score / 50.0)",
    "softcap_int": "30 * tanh(score / 30)",
    "alibi": "score + w[h, 0] * (kv_idx - q_idx)",
    "bias": "score + w[h, min(abs(q_idx - kv_idx), 15)]",
    "sigmoid": "sigmoid(score) * 4.0 - 2.0",
    "exp_log": "exp(score / 4.0) - log(score * score + 1) + sqrt(score * score + 2.0)",
    "if_else": "score * 2.0 if score > 0.5 else score ** 3 - 1.0",
    "condition_on_indices": "score if kv_idx <= q_idx else score / 8.0 + alpha",
    "min_max": "max(min(score, 3.0), -2.0 * score, score * score - 5.0)",
    "abs": "abs(score - 1.0) * score",
    "powers": "score ** 2 + 2.0 ** score + abs(score) ** 1.5 + (score * score + 1.0) ** score",
    "quotient": "(score + 3.0) / (score * score + 1.0) - 1.0 / (score * score + 2.0)",
    "floor_mod": "score % 2.5 + floor(score) + score // 0.75 + q_idx % 3",
    "scalar": "score * alpha + k0",
    "int_valued": "q_idx - kv_idx",
    "nested": "tanh(sigmoid(exp(score / 10.0)) * score) + -(-score)",
}


def _env(rng: np.random.Generator, n: int) -> dict:
    return {"b": rng.integers(0, 3, n), "h": rng.integers(0, 4, n), "q_idx": rng.integers(0, 30, n),
            "kv_idx": rng.integers(0, 30, n), "sq": np.full(n, 30), "sk": np.full(n, 30),
            "score": rng.normal(size=n) * 3.0}


def _regular(tree: Expr, env: dict, arrays: dict, scalars: dict, n: int) -> np.ndarray:
    """Points where the derivative is claimed: every value finite, and every step
    (floor, //, %) of a score-dependent quotient below 1e4 (denser steps than any difference can see)."""
    ok = np.ones(n, dtype=bool)
    for node in walk(tree):
        if node.ty is Ty.BOOL:
            continue
        ok &= np.isfinite(np.broadcast_to(evaluate(node, env, arrays, scalars), (n,)).astype(float))
        if not depends_on(node, "score"):
            continue
        step = None
        if isinstance(node, Binary) and node.op in ("//", "%"):
            step = evaluate(Binary("/", node.a, node.b, Ty.FLOAT), env, arrays, scalars)
        if isinstance(node, Call) and node.fn == "floor":
            step = evaluate(node.args[0], env, arrays, scalars)
        if step is not None:  # away from the steps, and not too many of them
            ok &= np.broadcast_to((np.abs(step) < 1e4) & (np.abs(step - np.round(step)) > 1e-6), (n,))
        if isinstance(node, Binary) and node.op == "**" and depends_on(node.b, "score"):
            ok &= np.broadcast_to(evaluate(node.a, env, arrays, scalars) > 0, (n,))  # through log(base)
        if (isinstance(node, Binary) and node.op == "**") or (isinstance(node, Call) and node.fn in ("sqrt", "log")):
            base = evaluate(node.a if isinstance(node, Binary) else node.args[0], env, arrays, scalars)
            ok &= np.broadcast_to(np.isfinite(base) & (base != 0), (n,))  # the chain rule's inf * 0 there
    return ok


def check_derivative(tree: object, seed: int, n: int = 64) -> int:
    """Compare d tree / d score with central differences where they are stable; return how many were."""
    rng = np.random.default_rng(seed)
    env, arrays = _env(rng, n), random_tensors(rng, batch=3, heads=4, seqlen_k=30)
    scalars = {"alpha": rng.normal(size=n), "k0": rng.integers(-5, 5, n)}
    raw = derivative(tree)  # type: ignore[arg-type]
    grad = simplify(raw)
    assert grad.ty is Ty.FLOAT or isinstance(grad, Const)

    def f(score: np.ndarray) -> np.ndarray:
        value = evaluate(tree, {**env, "score": score}, arrays, scalars)  # type: ignore[arg-type]
        return np.broadcast_to(value, (n,)).astype(float)

    s = env["score"]
    step = 1e-5 * np.maximum(1.0, np.abs(s))
    got = np.broadcast_to(evaluate(grad, env, arrays, scalars), (n,)).astype(float)
    unsimplified = np.broadcast_to(evaluate(raw, env, arrays, scalars), (n,)).astype(float)
    with np.errstate(all="ignore"):
        fd1 = (f(s + step) - f(s - step)) / (2 * step)
        fd2 = (f(s + step / 2) - f(s - step / 2)) / step
        # A kink or jump within the step shows as disagreement between step sizes; a tiny step also exposes
        # steps (floor, //) too dense for the others to see.
        fd3 = (f(s + step / 1000) - f(s - step / 1000)) / (step / 500)
        stable = np.isfinite(fd1) & np.isfinite(fd2) & np.isfinite(fd3)
        stable &= (np.abs(fd1 - fd2) <= 1e-5 * (1 + np.abs(fd2))) & (np.abs(fd3 - fd2) <= 1e-3 * (1 + np.abs(fd2)))
        stable &= _regular(tree, env, arrays, scalars, n)  # type: ignore[arg-type]
        stable &= np.abs(f(s)) * 1e-13 < step / 1000 * (1 + np.abs(fd2))  # a change the floats can resolve
        bad = stable & ~(np.abs(got - fd2) <= 1e-4 * (1 + np.abs(fd2)))
    assert not bad.any(), (canonical(grad), s[bad], got[bad], fd2[bad])  # type: ignore[arg-type]
    both = np.isfinite(got) & np.isfinite(unsimplified)
    assert np.allclose(got[both], unsimplified[both], rtol=1e-9, atol=1e-12), canonical(grad)
    return int(stable.sum())


@pytest.mark.parametrize("name", sorted(MODS))
def test_named_score_mods(name: str) -> None:
    tree = parse(MODS[name], role="score_mod", tensors=TENSORS, scalars=SCALARS)
    assert check_derivative(tree, seed=len(name)) >= 40  # most points are away from any kink


def test_compact_forms() -> None:
    def grad(source: str) -> object:
        return simplify(derivative(parse(source, role="score_mod", tensors=TENSORS, scalars=SCALARS)))

    assert grad("50.0 * tanh(score / 50.0)") == parse("1.0 - tanh(score / 50.0) ** 2", role="score_mod")
    assert grad("score + w[h, 0] * (kv_idx - q_idx)") == Const(1.0, Ty.FLOAT)
    assert grad("score * 0.125") == Const(0.125, Ty.FLOAT)
    assert grad("q_idx - kv_idx") == Const(0.0, Ty.FLOAT)
    assert grad("floor(score) + score // 2") == Const(0.0, Ty.FLOAT)
    assert canonical(grad("score * score")) == "2.0 * score"  # type: ignore[arg-type]
    assert canonical(grad("sigmoid(score)")) == "sigmoid(score) * (1.0 - sigmoid(score))"  # type: ignore[arg-type]
    assert canonical(grad("score if q_idx > kv_idx else 2 * score")) == \
        "1.0 if q_idx > kv_idx else 2.0"  # type: ignore[arg-type]
    with pytest.raises(ExprError, match="no derivative"):
        derivative(parse("q_idx < 1", role="mask"))


def test_simplify_rules() -> None:
    def s(source: str) -> str:
        return canonical(simplify(parse(source, role="score_mod", tensors=TENSORS, scalars=SCALARS)))

    assert s("score + 0.0") == "score"
    assert s("score * 1.0 * (2.0 * 3.0)") == "6.0 * score"
    assert s("score * 0") == "0.0"
    assert s("--score") == "score"
    assert s("score if q_idx > 1 else score") == "score"
    assert s("alpha if 1 > 2 else score") == "score"
    assert s("q_idx + 0.0") == "1.0 * q_idx"  # the type stays FLOAT
    assert s("50.0 * (score / 50.0)") == "score"
    assert s("score / 3.0") == "score / 3.0"
    assert s("score - score + 1") == "1.0"
    assert s("2147483647 + q_idx + 1") == "q_idx + 2147483647 + 1"  # too large to fold into one literal
    assert s("exp(1000.0)") == "exp(1000.0)"  # not finite: not folded
    assert canonical(simplify(parse("not not (q_idx < 1) and True", role="mask"))) == "q_idx < 1"
    assert canonical(simplify(parse("q_idx < 1 or 1 > 0", role="mask"))) == "True"


@settings(max_examples=150)
@given(st.randoms(use_true_random=False), st.integers(0, 2**16))
def test_generated_score_mods(rng: random.Random, seed: int) -> None:
    tree = parse(score_source(rng, depth=4), role="score_mod", tensors=TENSORS, scalars=SCALARS)
    check_derivative(tree, seed)
    grad = simplify(derivative(tree))
    assert simplify(grad) == grad
    assert parse(canonical(grad), role="score_mod", tensors=TENSORS, scalars=SCALARS) == grad
    # simplify preserves values
    nprng = np.random.default_rng(seed)
    env, arrays = _env(nprng, 16), random_tensors(nprng, batch=3, heads=4, seqlen_k=30)
    scalars = {"alpha": nprng.normal(size=16), "k0": nprng.integers(-5, 5, 16)}
    before = np.broadcast_to(evaluate(tree, env, arrays, scalars), (16,)).astype(float)
    after = np.broadcast_to(evaluate(simplify(tree), env, arrays, scalars), (16,)).astype(float)
    both = np.isfinite(before) & np.isfinite(after) & (np.abs(before) < 1e12)
    assert np.allclose(before[both], after[both], rtol=1e-9, atol=1e-9), canonical(tree)


def test_dependence() -> None:
    tree = parse("score * w[h, q_idx] + alpha", role="score_mod", tensors=TENSORS, scalars=SCALARS)
    assert depends_on(tree, "score") and depends_on(tree, "q_idx") and not depends_on(tree, "kv_idx")
    assert derivative(tree, "alpha") == Const(1.0, Ty.FLOAT)
    assert TensorDecl("fp32", ("heads",)).ty is Ty.FLOAT
