"""Interval bounds and the tile classifier, against brute force.

Soundness is the contract: a tile is never EMPTY when an element is visible, never FULL when one is hidden,
and a value never leaves its bounds. For the band and chunk masks the classifier must also be exact on
tiles, so that blocks really are skipped.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.expr import (
    BoolBounds,
    Interval,
    TensorDecl,
    TileClass,
    Ty,
    bounds,
    classify,
    evaluate,
    parse,
    tensor_bounds_from_arrays,
)
from tests.test_expr_gen import SCALARS, TENSORS, Gen, mask_source, random_tensors

DIAG = "q_idx + sk - sq"
MASK_TENSORS = {**TENSORS, "prefix": TensorDecl("int32", ("batch",)), "seg": TensorDecl("int32", ("batch", "seqlen_q")),
                "kseg": TensorDecl("int32", ("batch", "seqlen_k"))}
MASKS = {
    "causal": f"kv_idx <= {DIAG}",
    "window": f"{DIAG} - 7 <= kv_idx <= {DIAG} + 3",
    "left_window": f"kv_idx >= {DIAG} - 20 and kv_idx <= {DIAG}",
    "chunked": f"({DIAG}) // 16 == kv_idx // 16 and kv_idx <= {DIAG}",
    "chunked_odd": f"({DIAG}) // 5 == kv_idx // 5",
    "prefix_lm": f"kv_idx < prefix[b] or kv_idx <= {DIAG}",
    "document": "seg[b, q_idx] == kseg[b, kv_idx] and kv_idx <= q_idx",
    "streaming": f"kv_idx <= {DIAG} and ({DIAG} - kv_idx <= 12 or kv_idx < 4)",
    "dilated": f"kv_idx <= {DIAG} and ({DIAG} - kv_idx) % 3 == 0",
    "heads": f"kv_idx <= {DIAG} if h % 2 == 0 else {DIAG} - kv_idx < 8 + b",
    "mod_negative": f"(kv_idx - {DIAG}) % -6 > -3",
    "product": "q_idx * kv_idx < 200 + k0",
    "range_divisor": "q_idx // (kv_idx - 5) >= 1 or kv_idx % (q_idx - 9) == 2",
    "float_tensor": "w[h, kv_idx] * (q_idx + 1) > alpha",
    "float_funcs": "tanh(q_idx / 10.0 - 1.0) < sigmoid(kv_idx - 8.0) - 0.5 or log(q_idx - kv_idx) < 1.0",
    "float_mod": "(q_idx - 5.5) % (kv_idx - 3.5) < 1.0 or (q_idx + 0.5) // (kv_idx - 6.5) == -1",
    "powers": "(q_idx - 10) ** 2 + 0.5 * kv_idx ** 0.5 < 40 and 2.0 ** (kv_idx - q_idx) > 0.01",
    "min_max_abs": "min(q_idx, kv_idx / 2) >= max(3, abs(q_idx - 9)) - 2",
    "floor": "floor(q_idx / 3.5) == kv_idx // 2 if q_idx > 5 else kv_idx % 7 == 0",
    "bool_eq": "(q_idx < 3) == (kv_idx > 5) != (q_idx - kv_idx < 0)",
    "exp_div": "exp(q_idx / (kv_idx - 3)) > 2.0 or sqrt(q_idx - kv_idx) < 1.5",
}
EXACT = ("causal", "window", "left_window", "chunked", "chunked_odd")


def problem(rng: np.random.Generator) -> dict:
    """One random call: shapes, runtime tensors, the point names and a random tile."""
    sq, sk = (int(x) for x in rng.integers(1, 65, 2))
    arrays = random_tensors(rng, batch=3, heads=4, seqlen_k=sk)
    arrays["prefix"] = rng.integers(0, sk + 1, 3).astype(np.int32)
    seg = np.sort(rng.integers(0, 4, (3, max(sq, sk))), axis=1).astype(np.int32)
    arrays["seg"], arrays["kseg"] = seg[:, :sq], seg[:, :sk]
    points = {"b": int(rng.integers(0, 3)), "h": int(rng.integers(0, 4)), "sq": sq, "sk": sk,
              "k0": int(rng.integers(-50, 50)), "alpha": float(rng.normal())}
    q0 = int(rng.integers(0, sq))
    k0 = int(rng.integers(0, sk))
    tile = ((q0, int(rng.integers(q0, min(sq, q0 + 24)))), (k0, int(rng.integers(k0, min(sk, k0 + 24)))))
    return {"arrays": arrays, "points": points, "tile": tile}


def visible(expr: object, case: dict, q: tuple[int, int], kv: tuple[int, int]) -> np.ndarray:
    points = case["points"]
    env = {**{k: points[k] for k in ("b", "h", "sq", "sk")},
           "q_idx": np.arange(q[0], q[1] + 1)[:, None], "kv_idx": np.arange(kv[0], kv[1] + 1)[None, :]}
    seen = evaluate(expr, env, case["arrays"], {k: points[k] for k in ("k0", "alpha")})  # type: ignore[arg-type]
    return np.broadcast_to(seen, (q[1] - q[0] + 1, kv[1] - kv[0] + 1))


def check_tile(expr: object, case: dict, q: tuple[int, int], kv: tuple[int, int]) -> TileClass:
    seen = visible(expr, case, q, kv)
    got = classify(expr, q, kv, case["points"], tensor_bounds_from_arrays(case["arrays"]))  # type: ignore[arg-type]
    assert not (got is TileClass.EMPTY and seen.any()), (q, kv, case["points"])
    assert not (got is TileClass.FULL and not seen.all()), (q, kv, case["points"])
    return got


def test_presets_and_custom_masks_are_sound() -> None:
    rng = np.random.default_rng(1)
    seen: dict[str, set[TileClass]] = {name: set() for name in MASKS}
    trees = {name: parse(src, role="mask", tensors=MASK_TENSORS, scalars=SCALARS) for name, src in MASKS.items()}
    for _ in range(120):
        case = problem(rng)
        for name, tree in trees.items():
            seen[name].add(check_tile(tree, case, *case["tile"]))
    for name in ("causal", "window", "chunked", "prefix_lm", "document", "streaming", "product"):
        assert seen[name] == set(TileClass), (name, seen[name])  # every class occurs: the test can tell


def test_band_and_chunk_masks_are_exact_on_blocks() -> None:
    rng = np.random.default_rng(2)
    trees = {name: parse(MASKS[name], role="mask") for name in EXACT}
    counts = {name: {c: 0 for c in TileClass} for name in EXACT}
    for _ in range(25):
        case = problem(rng)
        sq, sk = case["points"]["sq"], case["points"]["sk"]
        for bm, bn in ((16, 16), (8, 32)):
            for m in range(0, sq, bm):
                for n in range(0, sk, bn):
                    q, kv = (m, min(m + bm, sq) - 1), (n, min(n + bn, sk) - 1)
                    for name, tree in trees.items():
                        seen = visible(tree, case, q, kv)
                        want = (TileClass.FULL if seen.all() else TileClass.EMPTY if not seen.any()
                                else TileClass.PARTIAL)
                        got = classify(tree, q, kv, case["points"])
                        assert got is want, (name, q, kv, case["points"])
                        counts[name][got] += 1
    for name in EXACT:  # (a 5-wide chunk holds no whole block: never full)
        assert counts[name][TileClass.EMPTY] and counts[name][TileClass.PARTIAL], (name, counts[name])
        assert counts[name][TileClass.FULL] or name == "chunked_odd", (name, counts[name])


@settings(max_examples=150)
@given(st.randoms(use_true_random=False), st.integers(0, 2**16))
def test_generated_masks_are_sound(rng: random.Random, seed: int) -> None:
    tree = parse(mask_source(rng, depth=4), role="mask", tensors=TENSORS, scalars=SCALARS)
    nprng = np.random.default_rng(seed)
    for _ in range(4):
        case = problem(nprng)
        check_tile(tree, case, *case["tile"])


def _inside(value: float, found: Interval) -> bool:
    if np.isnan(value):
        return found.nan
    return bool(found.lo <= value <= found.hi)


@settings(max_examples=200)
@given(st.randoms(use_true_random=False), st.integers(0, 2**16), st.sampled_from(["float", "int"]))
def test_values_stay_inside_their_bounds(rng: random.Random, seed: int, ty: str) -> None:
    source = Gen(rng, score=True).expr(ty, 4)
    tree = parse(source, role="score_mod", tensors=TENSORS, scalars=SCALARS)
    nprng = np.random.default_rng(seed)
    case = problem(nprng)
    (q0, q1), (k0, k1) = case["tile"]
    s0 = float(nprng.normal() * 5)
    s1 = s0 + float(nprng.exponential(3)) * float(nprng.integers(0, 2))
    env = {**case["points"], "q_idx": Interval(q0, q1), "kv_idx": Interval(k0, k1), "score": Interval(s0, s1)}
    found = bounds(tree, env, tensor_bounds_from_arrays(case["arrays"]))
    assert isinstance(found, Interval)
    scores = np.unique(np.concatenate([[s0, s1], nprng.uniform(s0, s1, 3)]))
    grid = {**{k: case["points"][k] for k in ("b", "h", "sq", "sk")},
            "q_idx": np.arange(q0, q1 + 1)[:, None, None], "kv_idx": np.arange(k0, k1 + 1)[None, :, None],
            "score": scores[None, None, :]}
    values = evaluate(tree, grid, case["arrays"], {k: case["points"][k] for k in ("k0", "alpha")})
    for value in np.unique(values.ravel()):
        assert _inside(float(value), found), (source, float(value), found)


def test_operator_bounds() -> None:
    def iv(source: str, **env: object) -> object:
        return bounds(parse(source, role="score_mod"), env)  # type: ignore[arg-type]

    q = Interval(10, 13)
    assert iv("q_idx % 8", q_idx=q) == Interval(2, 5)
    assert iv("q_idx % 8", q_idx=Interval(6, 9)) == Interval(0, 7)
    assert iv("q_idx % -8", q_idx=q) == Interval(-6, -3)
    assert iv("q_idx // 4", q_idx=q) == Interval(2, 3)
    assert iv("q_idx // -4", q_idx=q) == Interval(-4, -3)
    assert iv("q_idx // kv_idx", q_idx=q, kv_idx=Interval(-1, 2)) == Interval(-13, 13)
    assert iv("q_idx // kv_idx", q_idx=q, kv_idx=Interval(0, 0)) == Interval(0, 0)
    assert iv("q_idx * kv_idx", q_idx=Interval(-2, 3), kv_idx=Interval(-5, 4)) == Interval(-15, 12)
    assert iv("abs(q_idx)", q_idx=Interval(-7, 3)) == Interval(0, 7)
    square = iv("q_idx ** 2", q_idx=Interval(-3, 2))
    assert -1e-300 < square.lo <= 0.0 and 9.0 <= square.hi < 9.0001
    assert iv("q_idx / kv_idx", q_idx=q, kv_idx=Interval(-1, 1)) == Interval(-np.inf, np.inf, True)
    assert iv("log(score)", score=Interval(-1.0, 1.0)).nan
    assert iv("floor(score)", score=Interval(-1.5, 2.5)) == Interval(-2, 2)
    assert iv("min(score, 1.0)", score=Interval(-np.inf, np.inf, True)).nan
    assert iv("score").nan and iv("q_idx") == Interval(-np.inf, np.inf)
    whole = bounds(parse("kv_idx <= q_idx", role="mask"), {"q_idx": q, "kv_idx": Interval(0, 11)})
    below = bounds(parse("kv_idx <= q_idx", role="mask"), {"q_idx": q, "kv_idx": Interval(0, 10)})
    assert below == BoolBounds(False, True)
    assert whole == BoolBounds(may_false=True, may_true=True)
    assert bounds(parse("doc[b] > 0", role="mask", tensors={"doc": TensorDecl("int32", ("batch",))}), {}) == \
        BoolBounds(True, True)
    assert Ty.BOOL is parse("True", role="mask").ty
