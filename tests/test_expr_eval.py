"""The NumPy reference evaluator: Python's semantics, the defined corner cases, clamped tensor reads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attngen.expr import ExprError, ScalarDecl, TensorDecl, evaluate, parse

Q = np.arange(-7, 8)[:, None]
K = np.array([-3, -2, -1, 1, 2, 5])[None, :]


def value(source: str, role: str = "score_mod", env: dict | None = None, **kw: object) -> np.ndarray:
    decls = {k: v for k, v in kw.items() if k in ("tensors", "scalars")}
    data = {k: v for k, v in kw.items() if k in ("arrays", "values")}
    expr = parse(source, role=role, **decls)  # type: ignore[arg-type]
    return evaluate(expr, env if env is not None else {"q_idx": Q, "kv_idx": K},
                    data.get("arrays", {}), data.get("values", {}))  # type: ignore[arg-type]


def python(fn: object) -> np.ndarray:
    return np.array([[fn(int(q), int(k)) for k in K[0]] for q in Q[:, 0]])  # type: ignore[operator]


def test_integer_floor_division_and_modulo_are_pythons() -> None:
    got = value("q_idx // kv_idx * 100 + q_idx % kv_idx")
    assert got.dtype == np.int64
    assert np.array_equal(got, python(lambda q, k: q // k * 100 + q % k))


def test_division_by_zero_is_defined() -> None:
    env = {"q_idx": np.array([-5, 0, 5]), "kv_idx": 0}
    assert np.array_equal(value("q_idx // kv_idx", env=env), [0, 0, 0])
    assert np.array_equal(value("q_idx % kv_idx", env=env), [0, 0, 0])
    assert np.array_equal(value("q_idx / kv_idx", env=env), [-np.inf, np.nan, np.inf], equal_nan=True)
    assert math.isnan(float(value("(-8) ** 0.5", env={})))


def test_float_division_modulo_and_power() -> None:
    got = value("(q_idx + 0.5) // (kv_idx * 0.75) + (q_idx - 0.25) % (kv_idx / 2)")
    want = python(lambda q, k: (q + 0.5) // (k * 0.75) + (q - 0.25) % (k / 2))
    assert np.array_equal(got, want)
    assert value("q_idx / 2").dtype == np.float64
    assert value("q_idx ** 2").dtype == np.float64
    assert float(value("2 ** -1", env={})) == 0.5
    assert float(value("-1e-20 % 1.0", env={})) == 1.0  # Python's rounding, not fmod's


def test_functions() -> None:
    score = np.array([-30.0, -1.5, 0.0, 0.3, 2.5, 40.0])
    env = {"score": score}
    assert np.allclose(value("50.0 * tanh(score / 50.0)", env=env), 50 * np.tanh(score / 50))
    assert np.allclose(value("sigmoid(score)", env=env), 1 / (1 + np.exp(-score)))
    assert np.array_equal(value("floor(score)", env=env), [-30, -2, 0, 0, 2, 40])
    assert value("floor(score)", env=env).dtype == np.int64
    assert np.array_equal(value("abs(score)", env=env), np.abs(score))
    assert np.array_equal(value("floor(score * 1e30)", env=env)[[0, 5]], [-(2**31), 2**31 - 1])
    assert int(value("floor(log(-1.0))", env={})) == 0  # NaN floors to 0


def test_min_max_return_the_first_extreme_argument() -> None:
    assert value("min(q_idx, 2.5)", env={"q_idx": 1}).dtype == np.float64
    assert np.array_equal(value("max(q_idx, kv_idx, 0)"), python(lambda q, k: max(q, k, 0)))
    nan_first = value("min(log(-1.0), 1.0)", env={})
    nan_second = value("min(1.0, log(-1.0))", env={})
    assert math.isnan(float(nan_first)) and float(nan_second) == 1.0  # as Python's min


def test_conditions_and_bools() -> None:
    got = value("kv_idx <= q_idx and not (q_idx == 3) or kv_idx == 5", role="mask")
    assert got.dtype == np.bool_ and got.shape == (Q.size, K.size)
    assert np.array_equal(got, python(lambda q, k: (k <= q and q != 3) or k == 5))
    assert np.array_equal(value("q_idx if kv_idx > 0 else 0.5"), python(lambda q, k: q if k > 0 else 0.5))
    assert np.array_equal(value("-3 < q_idx <= kv_idx", role="mask"), python(lambda q, k: -3 < q <= k))


def test_tensor_reads_are_clamped_into_the_actual_shape() -> None:
    doc = np.array([[10, 11, 12, 13], [20, 21, 22, 23]], dtype=np.int32)
    tensors = {"doc": TensorDecl("int32", ("batch", "seqlen_q"))}
    env = {"b": np.array([-1, 0, 1, 9]), "q_idx": np.array([-5, 2, 3, 100])}
    got = value("doc[b, q_idx]", env=env, tensors=tensors, arrays={"doc": doc})
    assert got.dtype == np.int64 and list(got) == [10, 12, 23, 23]
    bias = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
    got = value("score + bias[h, abs(q_idx - kv_idx)]", env={"score": 1.0, "h": 1, "q_idx": Q, "kv_idx": K},
                tensors={"bias": TensorDecl("fp32", ("heads", 3))}, arrays={"bias": bias})
    assert got.dtype == np.float64
    assert np.allclose(got, python(lambda q, k: 1.0 + float(bias[1, min(abs(q - k), 2)])))


def test_scalars_and_missing_values() -> None:
    decl = {"alpha": ScalarDecl("fp32"), "n": ScalarDecl("int32")}
    assert float(value("alpha * n", env={}, scalars=decl, values={"alpha": 1.5, "n": 4})) == 6.0
    with pytest.raises(ExprError, match="no value for 'q_idx'"):
        value("q_idx + 1", env={})
    with pytest.raises(ExprError, match="no array for the tensor 'doc'"):
        value("doc[b]", env={"b": 0}, tensors={"doc": TensorDecl("int32", ("batch",))})
    with pytest.raises(ExprError, match="2 dims"):
        value("doc[b]", env={"b": 0}, tensors={"doc": TensorDecl("int32", ("batch",))},
              arrays={"doc": np.zeros((2, 2))})


def test_int64_wraps_silently() -> None:
    got = value("q_idx * q_idx * q_idx * q_idx", env={"q_idx": np.array([2**20])})
    assert got.dtype == np.int64  # 2**80 wraps as int64 arithmetic does (documented: no overflow checks)
