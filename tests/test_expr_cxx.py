"""The emitted C++ against the Python reference: values (`emit`), tile classes (`emit_classify`) and ranges
(`emit_bounds`), compiled with the prelude by the host g++; and the same code compiled by NVRTC as device code.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attngen.expr import (
    Expr,
    Interval,
    TileClass,
    Ty,
    bounds,
    canonical,
    classify,
    emit,
    emit_bounds,
    emit_classify,
    evaluate,
    parse,
    tensor_bounds_from_arrays,
)
from attngen.expr.cxx import DOMAIN
from attngen.expr.interval import Bounder
from attngen.expr.nodes import walk
from tests.test_expr_gen import SCALARS, Gen, mask_source
from tests.test_expr_interval import MASK_TENSORS, MASKS

PRELUDE_DIR = Path(__file__).resolve().parents[1] / "templates" / "features"
NAMES = {"b": "b", "h": "h", "q_idx": "q_idx", "kv_idx": "kv_idx", "sq": "sq", "sk": "sk", "score": "score",
         "alpha": "p.alpha", "k0": "p.k0"}
TILE = {"q": ("q_lo", "q_hi"), "kv": ("kv_lo", "kv_hi")}
SHAPES = {"doc": (3, 64), "w": (4, 16), "prefix": (3,), "seg": (3, 64), "kseg": (3, 64)}
VALUES = [
    "score + w[h, min(abs(q_idx - kv_idx), 15)]", "50.0 * tanh(score / 50.0)", "1.0 - tanh(score / 50.0) ** 2",
    "sigmoid(score) * (1.0 - sigmoid(score))", "exp(score / 8.0) + log(score * score + 1.0) - sqrt(abs(score))",
    "score ** 3 - 2.0 ** (score / 4.0) + (score * score + 1.0) ** 0.5", "score / (q_idx + 1) + kv_idx / 7",
    "(score + 10.5) // 0.75 + (score - 0.25) % 2.5 + (-score) % -1.5", "floor(score * 3.0) + q_idx % 5",
    "max(score, -1.0, q_idx * 0.5) - min(score, kv_idx, alpha)", "score * alpha + k0",
    "score if kv_idx <= q_idx + sk - sq else score - 1000.0", "q_idx * kv_idx * 300 + sk * sq",
    "q_idx * kv_idx // (k0 + 1) - abs(k0) % 7", "-q_idx * -kv_idx + floor(-score)", "doc[b, kv_idx] * 2 - 1",
    "abs(q_idx - kv_idx) ** 2 / 16.0", "min(q_idx, kv_idx) * 65536 - max(b, h)",
]


def _int64_safe(expr: Expr) -> bool:
    """Whether every INT value over the domain fits in int64 (beyond it NumPy and C++ need not agree)."""
    env = {**DOMAIN, "k0": Interval(-(2**31), 2**31 - 1)}
    bounder = Bounder(env, None)  # type: ignore[arg-type]
    bounder.of(expr)
    return all(node.ty is not Ty.INT or (-(2**63) <= found.lo and found.hi < 2**63)  # noqa: SIM300
               for node, found in bounder.memo.values())


def _accessors(name: str, dims: tuple[int, ...], ctype: str) -> str:
    idx = ", ".join(f"long long i{d}" for d in range(len(dims)))
    at = "0"
    for d, n in enumerate(dims):
        at = f"({at}) * {n} + ag_clamp(i{d}, {n}LL)"
    rng_t, big = ("AgIRange", "long long") if ctype == "int" else ("AgFRange", "float")
    pairs = ", ".join(f"long long lo{d}, long long hi{d}" for d in range(len(dims)))
    loops, flat = "", "0"
    for d, n in enumerate(dims):
        loops += f"lo{d} = ag_clamp(lo{d}, {n}LL); hi{d} = ag_clamp(hi{d}, {n}LL);\n"
    body = ""
    for d, n in enumerate(dims):
        body += f"for (long long j{d} = lo{d}; j{d} <= hi{d}; ++j{d}) "
        flat = f"({flat}) * {n} + j{d}"
    extra = ", false" if ctype == "float" else ""
    return f"""
ATTNGEN_HD {ctype} tensor_{name}(const P& p, {idx}) {{ return p.{name}[{at}]; }}
ATTNGEN_HD {rng_t} tensor_bounds_{name}(const P& p, {pairs}) {{
  {loops}  bool first = true; {big} lo = 0, hi = 0;
  {body}{{ const {big} v = p.{name}[{flat}]; if (first || v < lo) lo = v; if (first || v > hi) hi = v; first = false; }}
  return {rng_t}{{lo, hi{extra}}};
}}
"""


def _program(arrays: dict[str, np.ndarray], values: list[Expr], masks: list[Expr], ranges: list[Expr],
             host: bool = True) -> str:
    members = "".join(f"const {'int' if a.dtype.kind == 'i' else 'float'}* {n}; " for n, a in arrays.items())
    parts = ["#include \"expr_prelude.cuh\"\n", f"struct P {{ {members}float alpha; int k0; }};\n"]
    for name, a in arrays.items():
        parts.append(_accessors(name, a.shape, "int" if a.dtype.kind == "i" else "float"))
    for k, e in enumerate(values):
        parts.append(f"ATTNGEN_HD double value_{k}(const P& p, int b, int h, int q_idx, int kv_idx, int sq, int sk, "
                     f"float score) {{ return (double)({emit(e, NAMES)}); }}\n")
    for k, e in enumerate(masks):
        parts.append(f"ATTNGEN_HD bool visible_{k}(const P& p, int b, int h, int q_idx, int kv_idx, int sq, int sk) "
                     f"{{ return {emit(e, NAMES)}; }}\n")
        parts.append(f"ATTNGEN_HD int classify_{k}(const P& p, int b, int h, int sq, int sk, int q_lo, int q_hi, "
                     f"int kv_lo, int kv_hi) {{\n{emit_classify(e, NAMES, **TILE, indent=2)}\n}}\n")  # type: ignore[arg-type]
    for k, e in enumerate(ranges):
        lines, var = emit_bounds(e, NAMES, **TILE)  # type: ignore[arg-type]
        body = "\n  ".join(lines)
        parts.append(f"ATTNGEN_HD AgIRange range_{k}(const P& p, int b, int h, int sq, int sk, int q_lo, int q_hi, "
                     f"int kv_lo, int kv_hi) {{\n  {body}\n  return {var};\n}}\n")
    parts.append(_main(arrays, values, masks, ranges) if host else _kernel(values, masks, ranges))
    return "".join(parts)


def _switch(kind: str, count: int, call: str) -> str:
    cases = "".join(f"    case {k}: return {kind}_{k}({call});\n" for k in range(count))
    return f"  switch (k) {{\n{cases}  }}\n"


def _main(arrays: dict[str, np.ndarray], values: list[Expr], masks: list[Expr], ranges: list[Expr]) -> str:
    data = ""
    for name, a in arrays.items():
        ctype = "int" if a.dtype.kind == "i" else "float"
        items = ", ".join(repr(float(x)) + "f" if ctype == "float" else str(int(x)) for x in a.ravel())
        data += f"static const {ctype} data_{name}[] = {{{items}}};\n"
    init = ", ".join(f"data_{n}" for n in arrays)
    return data + f"""
#include <cstdio>
static double value(int k, const P& p, int b, int h, int q, int kv, int sq, int sk, float s) {{
{_switch("value", len(values), "p, b, h, q, kv, sq, sk, s")}  return 0; }}
static bool visible(int k, const P& p, int b, int h, int q, int kv, int sq, int sk) {{
{_switch("visible", len(masks), "p, b, h, q, kv, sq, sk")}  return false; }}
static int classify(int k, const P& p, int b, int h, int sq, int sk, int q0, int q1, int k0, int k1) {{
{_switch("classify", len(masks), "p, b, h, sq, sk, q0, q1, k0, k1")}  return -1; }}
static AgIRange range(int k, const P& p, int b, int h, int sq, int sk, int q0, int q1, int k0, int k1) {{
{_switch("range", len(ranges), "p, b, h, sq, sk, q0, q1, k0, k1")}  return AgIRange{{0, 0}}; }}
int main() {{
  char kind;
  int k, b, h, q, kv, sq, sk, q0, q1, k0, k1, n;
  float s, alpha;
  while (std::scanf(" %c %d %d %d %d %d", &kind, &k, &b, &h, &sq, &sk) == 6) {{
    if (kind == 'V') {{
      std::scanf("%d %d %f %f %d", &q, &kv, &s, &alpha, &n);
      const P p{{{init}, alpha, n}};
      std::printf("%.17g\\n", value(k, p, b, h, q, kv, sq, sk, s));
    }} else {{
      std::scanf("%d %d %d %d %f %d", &q0, &q1, &k0, &k1, &alpha, &n);
      const P p{{{init}, alpha, n}};
      if (kind == 'R') {{
        const AgIRange r = range(k, p, b, h, sq, sk, q0, q1, k0, k1);
        std::printf("%lld %lld\\n", r.lo, r.hi);
        continue;
      }}
      bool any = false, all = true;
      for (int i = q0; i <= q1; ++i)
        for (int j = k0; j <= k1; ++j) {{
          const bool v = visible(k, p, b, h, i, j, sq, sk);
          any = any || v;
          all = all && v;
        }}
      std::printf("%d %d %d\\n", classify(k, p, b, h, sq, sk, q0, q1, k0, k1), (int)any, (int)all);
    }}
  }}
  return 0;
}}
"""


def _kernel(values: list[Expr], masks: list[Expr], ranges: list[Expr]) -> str:
    calls = "".join(f"  acc += value_{k}(p, b, h, q, kv, sq, sk, s);\n" for k in range(len(values)))
    calls += "".join(f"  acc += visible_{k}(p, b, h, q, kv, sq, sk);\n"
                     f"  acc += classify_{k}(p, b, h, sq, sk, q, q + 3, kv, kv + 7);\n" for k in range(len(masks)))
    calls += "".join(f"  acc += range_{k}(p, b, h, sq, sk, q, q + 3, kv, kv + 7).hi;\n" for k in range(len(ranges)))
    return f"""
extern "C" __global__ void expr_probe(P p, int b, int h, int sq, int sk, float s, double* out) {{
  const int q = threadIdx.x, kv = blockIdx.x;
  double acc = 0;
{calls}  out[q] = acc;
}}
"""


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    seg = np.sort(rng.integers(0, 5, (3, 64)), axis=1).astype(np.int32)
    return {"doc": rng.integers(-(2**31), 2**31 - 1, (3, 64)).astype(np.int32),
            "w": rng.normal(size=(4, 16)).astype(np.float32), "prefix": rng.integers(0, 64, 3).astype(np.int32),
            "seg": seg, "kseg": seg.copy()}


def _cases() -> tuple[list[Expr], list[Expr], list[Expr]]:
    parse_as = {"tensors": MASK_TENSORS, "scalars": SCALARS}
    rng = random.Random(11)
    values = [parse(s, role="score_mod", **parse_as) for s in VALUES]  # type: ignore[arg-type]
    gen = Gen(rng, floats=False)
    values += [parse(gen.expr(ty, 4), role="score_mod" if ty == "int" else "mask", **parse_as)  # type: ignore[arg-type]
               for ty in ("int", "bool") * 25]
    masks = [parse(s, role="mask", **parse_as) for s in MASKS.values()]  # type: ignore[arg-type]
    masks += [parse(mask_source(rng, depth=4, floats=f), role="mask", **parse_as)  # type: ignore[arg-type]
              for f in (False, True) * 20]
    ranges = [parse(gen.expr("int", 4), role="score_mod", **parse_as) for _ in range(30)]  # type: ignore[arg-type]
    keep = [e for e in values if _int64_safe(e)], [e for e in masks if _int64_safe(e)]
    return keep[0], keep[1], [e for e in ranges if _int64_safe(e)]


def _has_float(e: Expr) -> bool:
    return any(node.ty is Ty.FLOAT for node in walk(e))


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, arrays: dict[str, np.ndarray]) -> tuple:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH: the emitted C++ is not compiled on this machine")
    values, masks, ranges = _cases()
    folder = tmp_path_factory.mktemp("expr_cxx")
    source = folder / "probe.cpp"
    source.write_text(_program(arrays, values, masks, ranges))
    binary = folder / "probe"
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-fwrapv", "-Wall", "-Wno-unused-variable",
                            "-Wno-unused-parameter", f"-I{PRELUDE_DIR}", str(source), "-o", str(binary)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    return values, masks, ranges, binary


def _run(binary: Path, queries: list[str]) -> list[str]:
    done = subprocess.run([str(binary)], input="\n".join(queries) + "\n", capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def _point(rng: np.random.Generator, big: bool) -> dict:
    """A point inside the names' domains; `big` reaches their ends (where int would overflow)."""
    top = 2**24 if big else 70
    k0 = rng.integers(-(2**31), 2**31) if big else rng.integers(-9, 9)
    return {"b": int(rng.integers(0, 3 if not big else 65536)), "h": int(rng.integers(0, 4)),
            "q_idx": int(rng.integers(0, top)), "kv_idx": int(rng.integers(0, top)), "sq": int(rng.integers(1, top)),
            "sk": int(rng.integers(1, top)), "score": float(np.float32(rng.normal() * 6)),
            "alpha": float(np.float32(rng.normal())), "k0": int(k0)}


def test_values_match_the_reference(host: tuple, arrays: dict[str, np.ndarray]) -> None:
    values, _, _, binary = host
    rng = np.random.default_rng(3)
    queries, expected = [], []
    for k, e in enumerate(values):
        for i in range(40):
            p = _point(rng, big=i % 3 == 0)
            queries.append(f"V {k} {p['b']} {p['h']} {p['sq']} {p['sk']} {p['q_idx']} {p['kv_idx']} {p['score']!r} "
                           f"{p['alpha']!r} {p['k0']}")
            want = evaluate(e, p, arrays, {"alpha": p["alpha"], "k0": p["k0"]})
            expected.append((e, p, want))
    for line, (e, p, want) in zip(_run(binary, queries), expected, strict=False):
        got = float(line)
        if e.ty is Ty.FLOAT:
            if np.isfinite(want) and abs(float(want)) < 1e30:
                assert got == pytest.approx(float(want), rel=2e-5, abs=2e-5), (canonical(e), p, got, float(want))
        else:
            assert got == float(int(want)), (canonical(e), p, got, int(want))


def _tile(rng: np.random.Generator) -> dict:
    sq, sk = int(rng.integers(1, 65)), int(rng.integers(1, 65))
    q0, k0 = int(rng.integers(0, sq)), int(rng.integers(0, sk))
    return {"b": int(rng.integers(0, 3)), "h": int(rng.integers(0, 4)), "sq": sq, "sk": sk,
            "q": (q0, int(rng.integers(q0, min(sq, q0 + 20)))), "kv": (k0, int(rng.integers(k0, min(sk, k0 + 20)))),
            "alpha": float(np.float32(rng.normal())), "k0": int(rng.integers(-60, 60))}


def _tile_query(kind: str, k: int, t: dict) -> str:
    return (f"{kind} {k} {t['b']} {t['h']} {t['sq']} {t['sk']} {t['q'][0]} {t['q'][1]} {t['kv'][0]} {t['kv'][1]} "
            f"{t['alpha']!r} {t['k0']}")


def test_classify_matches_and_is_sound(host: tuple, arrays: dict[str, np.ndarray]) -> None:
    _, masks, _, binary = host
    rng = np.random.default_rng(4)
    tb = tensor_bounds_from_arrays(arrays)
    queries, cases = [], []
    for k, e in enumerate(masks):
        for _ in range(30):
            t = _tile(rng)
            queries.append(_tile_query("T", k, t))
            cases.append((e, t))
    counts = {c: 0 for c in TileClass}
    for line, (e, t) in zip(_run(binary, queries), cases, strict=False):
        got, any_seen, all_seen = (int(x) for x in line.split())
        assert not (got == 0 and any_seen) and not (got == 2 and not all_seen), (canonical(e), t, got)
        counts[TileClass(got)] += 1
        if _has_float(e):
            continue  # float32 on the C++ side: soundness only
        points = {k: t[k] for k in ("b", "h", "sq", "sk", "alpha", "k0")}
        assert TileClass(got) is classify(e, t["q"], t["kv"], points, tb), (canonical(e), t)
        env = {**points, "q_idx": np.arange(t["q"][0], t["q"][1] + 1)[:, None],
               "kv_idx": np.arange(t["kv"][0], t["kv"][1] + 1)[None, :]}
        seen = evaluate(e, env, arrays)
        assert (bool(np.any(seen)), bool(np.all(seen))) == (bool(any_seen), bool(all_seen)), (canonical(e), t)
    assert min(counts.values()) > 50, counts


def test_ranges_match(host: tuple, arrays: dict[str, np.ndarray]) -> None:
    _, _, ranges, binary = host
    rng = np.random.default_rng(6)
    tb = tensor_bounds_from_arrays(arrays)
    queries, cases = [], []
    for k, e in enumerate(ranges):
        for _ in range(20):
            t = _tile(rng)
            queries.append(_tile_query("R", k, t))
            cases.append((e, t))
    for line, (e, t) in zip(_run(binary, queries), cases, strict=False):
        lo, hi = (int(x) for x in line.split())
        env = {**{k: t[k] for k in ("b", "h", "sq", "sk", "k0")}, "q_idx": Interval(*t["q"]),
               "kv_idx": Interval(*t["kv"])}
        assert Interval(lo, hi) == bounds(e, env, tb), (canonical(e), t)


def test_types_are_lean() -> None:
    causal = parse("kv_idx <= q_idx + sk - sq and (q_idx + sk - sq - kv_idx <= 1024 or kv_idx < 4)", role="mask")
    assert "long long" not in emit(causal, NAMES)
    assert "long long" not in emit_classify(causal, NAMES, **TILE)  # type: ignore[arg-type]
    assert "long long" not in emit_classify(parse(MASKS["chunked"], role="mask"), NAMES, **TILE)  # type: ignore[arg-type]
    product = emit(parse("q_idx * kv_idx < sk", role="mask"), NAMES)
    assert "long long" in product
    assert emit(parse("q_idx * 3 < sk", role="mask"), NAMES) == "((q_idx * 3) < sk)"
    body = emit_classify(parse(MASKS["document"], role="mask", tensors=MASK_TENSORS), NAMES, **TILE)  # type: ignore[arg-type]
    assert "tensor_bounds_seg(p, b, b, q_lo, q_hi)" in body and body.rstrip().endswith("? 2 : 1);")
    assert emit(parse("score + w[h, 0] * 2.5", role="score_mod", tensors=MASK_TENSORS), NAMES) == \
        "(score + (tensor_w(p, h, 0) * 2.5f))"


def test_nvrtc_compiles_the_emitted_code_as_device_code(arrays: dict[str, np.ndarray]) -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC (cuda-bindings) is not installed")
    from attngen.toolchain.compiler import compile_options, run_nvrtc

    values, masks, ranges = _cases()
    code = _program(arrays, values[:20], masks[:25], ranges[:8], host=False)
    prelude = (PRELUDE_DIR / "expr_prelude.cuh").read_text()
    code = code.replace('#include "expr_prelude.cuh"\n', prelude)
    out = run_nvrtc(code, "expr_probe.cu", compile_options("sm_80"))
    assert out.ok, out.log[-4000:]
    assert "expr_probe" in out.log or out.cubin


def test_device_tanh_is_within_its_stated_error(tmp_path: Path) -> None:
    """The device branch's tanh (the rational fit a softcap pays one MUFU for), taken from the prelude's text and
    compiled by g++ with host twins of its two PTX helpers: within 4e-7 relative of tanh over a dense sweep, 1 past
    the clamp, NaN kept."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    prelude = (PRELUDE_DIR / "expr_prelude.cuh").read_text()
    device = prelude[prelude.index("#if defined(__CUDACC__)"):]
    start = device.index("ATTNGEN_HD float ag_tanh(float x) {")
    body = device[start:device.index("\n}\n", start) + 3]
    main = "\n".join([
        "#include <cmath>", "#include <cstdio>", "#define ATTNGEN_HD static",
        "static float ag_clamp_nan(float x, float lo, float hi) { return x != x ? x : x < lo ? lo : x > hi ? hi : x; }",
        "static float ag_rcp_approx(float x) { return 1.f / x; }",
        body,
        "int main() { double worst = 0; float at = 0;",
        "  for (int i = -2000000; i <= 2000000; ++i) { float x = i * 6e-6f; if (i % 2) x = i * 5e-6f * 2.5f;",
        "    double want = std::tanh((double)x), got = ag_tanh(x);",
        "    double rel = want == 0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);",
        "    if (rel > worst) { worst = rel; at = x; } }",
        "  std::printf(\"%.3e %.6f %.9f %d\\n\", worst, at, ag_tanh(1e30f), (int)std::isnan(ag_tanh(NAN))); }",
    ])
    (tmp_path / "t.cpp").write_text(main)
    subprocess.run(["g++", "-std=c++17", "-O1", str(tmp_path / "t.cpp"), "-o", str(tmp_path / "t")], check=True)
    worst, _, big, nan = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True,
                                        check=True).stdout.split()
    assert float(worst) < 4e-7, worst
    assert abs(float(big) - 1.0) < 4e-7 and nan == "1"
