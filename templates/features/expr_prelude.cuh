// ---- The variant language's C++ helpers (attngen/expr/cxx.py emits calls to them) ----------------
// Python's semantics where C++ differs: floor division and modulo (x // 0 and x % 0 are 0 for ints;
// floats follow NumPy's divmod), min/max returning the first least/greatest argument, floor saturating
// into int (NaN -> 0). Tensor indices are clamped. Interval helpers (AgIRange, AgFRange, AgBools) bound
// an expression over a tile for the classifier. Plain C++: NVRTC device code and host g++ alike.
#ifndef ATTNGEN_EXPR_PRELUDE
#define ATTNGEN_EXPR_PRELUDE

#ifndef ATTNGEN_HD
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNGEN_HD __device__ __forceinline__
#else
#define ATTNGEN_HD inline
#endif
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define AG_INF __int_as_float(0x7f800000)
#ifndef INFINITY
#define INFINITY AG_INF
#endif
#else
#include <cmath>
#include <math.h>
#define AG_INF INFINITY
#endif

// ---- scalar helpers ----
ATTNGEN_HD int ag_floordiv(int a, int b) {
  if (b == 0) return 0;
  const int q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
ATTNGEN_HD long long ag_floordiv(long long a, long long b) {
  if (b == 0) return 0;
  const long long q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
ATTNGEN_HD int ag_mod(int a, int b) {
  if (b == 0 || b == -1) return 0;
  const int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
ATTNGEN_HD long long ag_mod(long long a, long long b) {
  if (b == 0 || b == -1) return 0;
  const long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// NumPy's float divmod (CPython's): the remainder takes the divisor's sign, the quotient is snapped.
ATTNGEN_HD float ag_mod(float a, float b) {
  float m = fmodf(a, b);
  if (b == 0.f) return m;
  if (m != 0.f) {
    if ((b < 0.f) != (m < 0.f)) m += b;
  } else {
    m = copysignf(0.f, b);
  }
  return m;
}
ATTNGEN_HD float ag_floordiv(float a, float b) {
  if (b == 0.f) return a / b;
  const float m = fmodf(a, b);
  float div = (a - m) / b;
  if (m != 0.f && ((b < 0.f) != (m < 0.f))) div -= 1.f;
  if (div == 0.f) return copysignf(0.f, a / b);
  float fd = floorf(div);
  if (div - fd > 0.5f) fd += 1.f;
  return fd;
}
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// A float quotient within 2 ulps (a reciprocal and a multiply), not the IEEE division subroutine.
ATTNGEN_HD float ag_fdiv(float a, float b) { return __fdividef(a, b); }
#else
ATTNGEN_HD float ag_fdiv(float a, float b) { return a / b; }
#endif
ATTNGEN_HD int ag_min(int a, int b) { return b < a ? b : a; }
ATTNGEN_HD long long ag_min(long long a, long long b) { return b < a ? b : a; }
ATTNGEN_HD float ag_min(float a, float b) { return b < a ? b : a; }
ATTNGEN_HD int ag_max(int a, int b) { return b > a ? b : a; }
ATTNGEN_HD long long ag_max(long long a, long long b) { return b > a ? b : a; }
ATTNGEN_HD float ag_max(float a, float b) { return b > a ? b : a; }
ATTNGEN_HD int ag_abs(int a) { return a < 0 ? -a : a; }
ATTNGEN_HD long long ag_abs(long long a) { return a < 0 ? -a : a; }
ATTNGEN_HD float ag_abs(float a) { return fabsf(a); }
ATTNGEN_HD int ag_floor(float x) {
  if (!(x == x)) return 0;
  const float f = floorf(x);
  if (f >= 2147483648.f) return 2147483647;
  if (f <= -2147483648.f) return -2147483647 - 1;
  return (int)f;
}
ATTNGEN_HD float ag_exp(float x) { return expf(x); }
ATTNGEN_HD float ag_log(float x) { return logf(x); }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// x clamped into [lo, hi], NaN kept (max.NaN / min.NaN: one instruction each, no branch).
ATTNGEN_HD float ag_clamp_nan(float x, float lo, float hi) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(lo));
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(r), "f"(hi));
  return r;
}
// 1 / x by one MUFU.RCP (about 1 ulp; no denormal guard, for denominators in [1, 2^126]).
ATTNGEN_HD float ag_rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// tanh as x P(x^2) / Q(x^2) on x clamped to +-7.9053 (where float tanh is 1 to 4e-7), P of degree 5 and Q of
// degree 3 (Q in [1, 17]) fitted for the least maximal relative error (benchmarks/NOTES.md): 9 FMAs, one
// MUFU.RCP and no branch, within 4e-7 of tanh over all floats, NaN kept. A softcap's inner loop pays one MUFU.
ATTNGEN_HD float ag_tanh(float x) {
  const float c = ag_clamp_nan(x, -7.90531110763549805f, 7.90531110763549805f);
  const float t = c * c;
  float p = 2.647716247e-11f;
  p = fmaf(p, t, -1.573038016e-08f);
  p = fmaf(p, t, 1.019148294e-05f);
  p = fmaf(p, t, 3.018444168e-03f);
  p = fmaf(p, t, 1.300905176e-01f);
  p = fmaf(p, t, 9.999999991e-01f);
  float q = 2.417995279e-04f;
  q = fmaf(q, t, 2.415980079e-02f);
  q = fmaf(q, t, 4.634238119e-01f);
  q = fmaf(q, t, 1.f);
  return c * p * ag_rcp_approx(q);
}
#else
ATTNGEN_HD float ag_tanh(float x) { return tanhf(x); }
#endif
ATTNGEN_HD float ag_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
ATTNGEN_HD float ag_sqrt(float x) { return sqrtf(x); }
ATTNGEN_HD float ag_pow(float x, float y) { return powf(x, y); }
ATTNGEN_HD float ag_sq(float x) { return x * x; }
ATTNGEN_HD int ag_clamp(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
ATTNGEN_HD long long ag_clamp(long long i, long long n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

// ---- intervals: [lo, hi]; a float range may also be NaN; a boolean may be false and/or true ----
struct AgIRange { long long lo, hi; };
struct AgFRange { float lo, hi; bool nan; };
struct AgBools { bool may_false, may_true; };

// Integer ranges over a range divisor (a constant divisor is emitted inline): x // 0 and x % 0 are 0.
ATTNGEN_HD AgIRange ag_iv_hull(AgIRange a, AgIRange b) {
  return AgIRange{a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}
ATTNGEN_HD AgIRange ag_iv_floordiv_pos(long long al, long long ah, long long dl, long long dh) {
  const long long c0 = ag_floordiv(al, dl), c1 = ag_floordiv(al, dh);
  const long long c2 = ag_floordiv(ah, dl), c3 = ag_floordiv(ah, dh);
  return AgIRange{ag_min(ag_min(c0, c1), ag_min(c2, c3)), ag_max(ag_max(c0, c1), ag_max(c2, c3))};
}
ATTNGEN_HD AgIRange ag_iv_floordiv(long long al, long long ah, long long bl, long long bh) {
  bool any = false;
  AgIRange r = AgIRange{0, 0};
  if (bl <= 0 && 0 <= bh) any = true;
  if (bh >= 1) {
    const AgIRange p = ag_iv_floordiv_pos(al, ah, bl > 1 ? bl : 1, bh);
    r = any ? ag_iv_hull(r, p) : p;
    any = true;
  }
  if (bl <= -1) {
    const AgIRange p = ag_iv_floordiv_pos(-ah, -al, -bh > 1 ? -bh : 1, -bl);
    r = any ? ag_iv_hull(r, p) : p;
  }
  return r;
}
ATTNGEN_HD AgIRange ag_iv_mod(long long al, long long ah, long long bl, long long bh) {
  if (bl == bh && bl != 0 && ag_floordiv(al, bl) == ag_floordiv(ah, bl)) {
    return AgIRange{ag_mod(al, bl), ag_mod(ah, bl)};
  }
  bool any = false;
  AgIRange r = AgIRange{0, 0};
  if (bl <= 0 && 0 <= bh) any = true;
  if (bh >= 1) {
    const long long lo = bl > 1 ? bl : 1;
    AgIRange p = AgIRange{0, al >= 0 ? ag_min(bh - 1, ah) : bh - 1};
    if (al >= 0 && ah < lo) p = AgIRange{al, ah};
    r = any ? ag_iv_hull(r, p) : p;
    any = true;
  }
  if (bl <= -1) {
    const long long hi = bh < -1 ? bh : -1;
    AgIRange p = AgIRange{ah <= 0 ? ag_max(bl + 1, al) : bl + 1, 0};
    if (hi < al && ah <= 0) p = AgIRange{al, ah};
    r = any ? ag_iv_hull(r, p) : p;
  }
  return r;
}

// Float ranges. Ends are widened outward (arithmetic by one ulp, library functions by four), so that a
// fused multiply-add or a function's last-bit error in the element test cannot leave the range.
ATTNGEN_HD bool ag_isinf(float x) { return x == AG_INF || x == -AG_INF; }
ATTNGEN_HD bool ag_isnan(float x) { return !(x == x); }
ATTNGEN_HD float ag_down(float x, int ulps) {
  for (int i = 0; i < ulps; ++i) x = (x == x && x != -AG_INF) ? nextafterf(x, -AG_INF) : x;
  return x;
}
ATTNGEN_HD float ag_up(float x, int ulps) {
  for (int i = 0; i < ulps; ++i) x = (x == x && x != AG_INF) ? nextafterf(x, AG_INF) : x;
  return x;
}
ATTNGEN_HD AgFRange ag_fv_full() { return AgFRange{-AG_INF, AG_INF, true}; }
ATTNGEN_HD AgFRange ag_fv_point(float x) { return AgFRange{x, x, ag_isnan(x)}; }
ATTNGEN_HD AgFRange ag_fv_of(AgIRange a) { return AgFRange{(float)a.lo, (float)a.hi, false}; }
ATTNGEN_HD bool ag_fv_has(AgFRange a, float x) { return a.lo <= x && x <= a.hi; }
ATTNGEN_HD bool ag_fv_finite(AgFRange a) { return !ag_isinf(a.lo) && !ag_isinf(a.hi); }
// The hull of candidate ends; a NaN candidate means anything.
ATTNGEN_HD AgFRange ag_fv_span4(float c0, float c1, float c2, float c3, bool nan, int ulps) {
  if (ag_isnan(c0) || ag_isnan(c1) || ag_isnan(c2) || ag_isnan(c3)) return ag_fv_full();
  const float lo = fminf(fminf(c0, c1), fminf(c2, c3)), hi = fmaxf(fmaxf(c0, c1), fmaxf(c2, c3));
  return AgFRange{ag_down(lo, ulps), ag_up(hi, ulps), nan};
}
ATTNGEN_HD AgFRange ag_fv_hull(AgFRange a, AgFRange b) {
  return AgFRange{fminf(a.lo, b.lo), fmaxf(a.hi, b.hi), a.nan || b.nan};
}
ATTNGEN_HD AgFRange ag_fv_select(bool may_false, bool may_true, AgFRange a, AgFRange b) {
  return !may_false ? a : (!may_true ? b : ag_fv_hull(a, b));
}
ATTNGEN_HD AgFRange ag_fv_neg(AgFRange a) { return AgFRange{-a.hi, -a.lo, a.nan}; }
ATTNGEN_HD AgFRange ag_fv_add(AgFRange a, AgFRange b) {
  const bool nan = a.nan || b.nan || (a.lo == -AG_INF && b.hi == AG_INF) || (a.hi == AG_INF && b.lo == -AG_INF);
  float lo = a.lo + b.lo, hi = a.hi + b.hi;
  lo = ag_isnan(lo) ? -AG_INF : lo;
  hi = ag_isnan(hi) ? AG_INF : hi;
  return AgFRange{ag_down(lo, 1), ag_up(hi, 1), nan};
}
ATTNGEN_HD AgFRange ag_fv_sub(AgFRange a, AgFRange b) { return ag_fv_add(a, ag_fv_neg(b)); }
ATTNGEN_HD float ag_mul0(float x, float y) { return (x == 0.f || y == 0.f) ? 0.f : x * y; }
ATTNGEN_HD AgFRange ag_fv_mul(AgFRange a, AgFRange b) {
  const bool nan = a.nan || b.nan || (ag_fv_has(a, 0.f) && !ag_fv_finite(b)) || (ag_fv_has(b, 0.f) && !ag_fv_finite(a));
  return ag_fv_span4(ag_mul0(a.lo, b.lo), ag_mul0(a.lo, b.hi), ag_mul0(a.hi, b.lo), ag_mul0(a.hi, b.hi), nan, 1);
}
ATTNGEN_HD AgFRange ag_fv_div(AgFRange a, AgFRange b) {
  if (ag_fv_has(b, 0.f)) return ag_fv_full();
  return ag_fv_span4(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi, a.nan || b.nan, 1);
}
ATTNGEN_HD AgFRange ag_fv_floordiv(AgFRange a, AgFRange b) {
  if (ag_fv_has(b, 0.f)) return ag_fv_full();
  const AgFRange q = ag_fv_div(a, b);
  const bool nan = q.nan || !ag_fv_finite(a);
  return AgFRange{floorf(ag_down(q.lo, 2)) - 1.f, floorf(ag_up(q.hi, 2)) + 1.f, nan};
}
ATTNGEN_HD AgFRange ag_fv_mod(AgFRange a, AgFRange b) {
  if (ag_fv_has(b, 0.f)) return ag_fv_full();
  const bool nan = a.nan || b.nan || !ag_fv_finite(a);
  if (b.lo > 0.f) return (a.lo >= 0.f && a.hi < b.lo) ? AgFRange{a.lo, a.hi, nan} : AgFRange{0.f, b.hi, nan};
  return (b.hi < a.lo && a.hi <= 0.f) ? AgFRange{a.lo, a.hi, nan} : AgFRange{b.lo, 0.f, nan};
}
ATTNGEN_HD AgFRange ag_fv_pow(AgFRange a, AgFRange b) {
  const bool nan = a.nan || b.nan;
  if (b.lo == b.hi && !nan && floorf(b.lo) == b.lo && fabsf(b.lo) < 16777216.f) {
    const float k = b.lo;
    if (k == 0.f) return AgFRange{1.f, 1.f, false};
    const bool zero = ag_fv_has(a, 0.f);
    if (zero && k < 0.f) return AgFRange{-AG_INF, AG_INF, nan};
    const float c0 = powf(a.lo, k), c1 = powf(a.hi, k), c2 = zero ? 0.f : c0;
    return ag_fv_span4(c0, c1, c2, c2, nan, 4);
  }
  if (a.lo >= 0.f) {
    AgFRange r = ag_fv_span4(powf(a.lo, b.lo), powf(a.lo, b.hi), powf(a.hi, b.lo), powf(a.hi, b.hi), nan, 4);
    if (a.lo == 0.f && b.lo < 0.f) r.lo = -AG_INF;
    return r;
  }
  return ag_fv_full();
}
ATTNGEN_HD AgFRange ag_fv_min(AgFRange a, AgFRange b) {
  if (a.nan || b.nan) return AgFRange{fminf(a.lo, b.lo), fmaxf(a.hi, b.hi), true};
  return AgFRange{fminf(a.lo, b.lo), fminf(a.hi, b.hi), false};
}
ATTNGEN_HD AgFRange ag_fv_max(AgFRange a, AgFRange b) {
  if (a.nan || b.nan) return AgFRange{fminf(a.lo, b.lo), fmaxf(a.hi, b.hi), true};
  return AgFRange{fmaxf(a.lo, b.lo), fmaxf(a.hi, b.hi), false};
}
ATTNGEN_HD AgFRange ag_fv_abs(AgFRange a) {
  if (a.lo >= 0.f) return a;
  if (a.hi <= 0.f) return ag_fv_neg(a);
  return AgFRange{0.f, fmaxf(-a.lo, a.hi), a.nan};
}
ATTNGEN_HD AgIRange ag_fv_floor(AgFRange a) {
  const long long lo = ag_floor(a.lo), hi = ag_floor(a.hi);
  return a.nan ? AgIRange{lo < 0 ? lo : 0, hi > 0 ? hi : 0} : AgIRange{lo, hi};
}
ATTNGEN_HD AgFRange ag_fv_up(float lo, float hi, bool nan) { return AgFRange{ag_down(lo, 4), ag_up(hi, 4), nan}; }
ATTNGEN_HD AgFRange ag_fv_exp(AgFRange a) { return ag_fv_up(ag_exp(a.lo), ag_exp(a.hi), a.nan); }
ATTNGEN_HD AgFRange ag_fv_tanh(AgFRange a) {
  // The device tanh is within 4e-7 relative: widen by more than that.
  AgFRange r = ag_fv_up(ag_tanh(a.lo), ag_tanh(a.hi), a.nan);
  r.lo -= 4e-6f * fabsf(r.lo);
  r.hi += 4e-6f * fabsf(r.hi);
  return r;
}
ATTNGEN_HD AgFRange ag_fv_sigmoid(AgFRange a) { return ag_fv_up(ag_sigmoid(a.lo), ag_sigmoid(a.hi), a.nan); }
ATTNGEN_HD AgFRange ag_fv_log(AgFRange a) {
  if (a.hi < 0.f) return ag_fv_full();
  return ag_fv_up(ag_log(a.lo < 0.f ? 0.f : a.lo), ag_log(a.hi), a.nan || a.lo < 0.f);
}
ATTNGEN_HD AgFRange ag_fv_sqrt(AgFRange a) {
  if (a.hi < 0.f) return ag_fv_full();
  return ag_fv_up(ag_sqrt(a.lo < 0.f ? 0.f : a.lo), ag_sqrt(a.hi), a.nan || a.lo < 0.f);
}
// Comparisons: op 0 <, 1 <=, 2 >, 3 >=, 4 ==, 5 !=.
ATTNGEN_HD AgBools ag_fv_cmp(int op, AgFRange a, AgFRange b) {
  bool f, t;
  if (op == 2 || op == 3) {
    const AgFRange s = a;
    a = b;
    b = s;
    op -= 2;
  }
  if (op == 0) {
    t = a.lo < b.hi;
    f = a.hi >= b.lo;
  } else if (op == 1) {
    t = a.lo <= b.hi;
    f = a.hi > b.lo;
  } else {
    t = a.lo <= b.hi && b.lo <= a.hi;
    f = !(a.lo == a.hi && a.hi == b.lo && b.lo == b.hi);
    if (op == 5) {
      const bool s = t;
      t = f;
      f = s;
    }
  }
  if (a.nan || b.nan) {
    if (op == 5) t = true; else f = true;
  }
  return AgBools{f, t};
}

#endif  // ATTNGEN_EXPR_PRELUDE
