"""The numba helpers generated CPU kernels call (``cvl.<name>`` in the generated source).

They exist where numba's own functions do not match the language (LANGUAGE.md section 5) or
would keep LLVM from vectorizing a loop:

* f16 and bf16 live in memory as uint16 bit patterns (numba has no usable half type); the
  conversions are integer bit operations with round to nearest even, branch-free, so a loop
  over half data still vectorizes. ``narrow_f64`` rounds f64 to f32 *to odd* first, so that
  f64 to half rounds once, as the reference does.
* ``fmaximum``/``fminimum`` are LLVM's NaN-propagating ``llvm.maximum``/``llvm.minimum``
  (NumPy's semantics); the loop vectorizer knows them as reductions, a compare-and-select
  with a NaN test it does not.
* ``exp_f32`` is a Cephes-style exp (< 1 ulp on the normal range) made of arithmetic and bit
  operations only: libm's ``expf`` is a scalar call that stops vectorization, and softmax
  spends most of its time there.
* i32 casts from floats truncate, saturate and send NaN to 0.

Generated sources carry a hash of this file, so editing it gives new source files and numba's
cache (which only watches the kernel's own file) never serves code built on older helpers.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

# Inlined into every kernel at numba IR level, so a kernel compiles to the same code whether the
# helpers come from numba's cache or are compiled in this process (else results differed in the
# last bit between processes: a cached helper is an opaque call, a fresh one is optimized in place).
_JIT = {"cache": True, "error_model": "numpy", "inline": "always"}


def _bitcast(src, dst):
    """An intrinsic reinterpreting the bits of a ``src`` value as ``dst`` (same width)."""

    @intrinsic
    def reinterpret(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(dst))

        return dst(src), codegen

    return reinterpret


f32_as_i32 = _bitcast(types.float32, types.int32)
i32_as_f32 = _bitcast(types.int32, types.float32)


def _nan_propagating(llvm_name: str):
    """An intrinsic calling ``llvm.maximum``/``llvm.minimum`` on two floats of one type."""

    @intrinsic
    def extremum(typingctx, a, b):
        if a != b or a not in (types.float32, types.float64):
            return None

        def codegen(context, builder, signature, args):
            t = context.get_value_type(a)
            fn = builder.module.declare_intrinsic(llvm_name, [t], ir.FunctionType(t, [t, t]))
            return builder.call(fn, args)

        return a(a, a), codegen

    return extremum


fmaximum = _nan_propagating("llvm.maximum")
fminimum = _nan_propagating("llvm.minimum")


# ---------------------------------------------------------------------------- half types


@numba.njit(**_JIT)
def f16_to_f32(h):
    """f16 bits to f32 (exact): rebias the exponent; subnormals renormalised by a float subtract."""
    v = np.int64(h)
    o = (v & 0x7FFF) << 13
    e = o & 0x0F800000
    normal = i32_as_f32(np.int32(o + (224 << 23 if e == 0x0F800000 else 112 << 23)))
    subnormal = i32_as_f32(np.int32(o + (113 << 23))) - np.float32(6.103515625e-05)
    f = subnormal if e == 0 else normal
    return i32_as_f32(np.int32(np.int64(f32_as_i32(f)) | ((v & 0x8000) << 16)))


@numba.njit(**_JIT)
def f32_to_f16(x):
    """f32 to f16 bits, round to nearest even; overflow to inf, NaN to a quiet NaN."""
    u = np.int64(f32_as_i32(x)) & 0xFFFFFFFF
    a = u & 0x7FFFFFFF
    # below 2^-14 the result is subnormal: adding 0.5 lines the 10 mantissa bits up at the
    # bottom of the float, rounded to nearest even by the FPU
    subnormal = (np.int64(f32_as_i32(abs(x) + np.float32(0.5))) & 0xFFFFFFFF) - 0x3F000000
    normal = (a - (112 << 23) + 0xFFF + ((a >> 13) & 1)) >> 13
    special = 0x7E00 if a > 0x7F800000 else 0x7C00
    h = special if a >= 0x47800000 else (subnormal if a < 0x38800000 else normal)
    return np.uint16(h | ((u >> 16) & 0x8000))


@numba.njit(**_JIT)
def bf16_to_f32(h):
    """bf16 bits to f32 (exact): the upper half of the f32 bits."""
    return i32_as_f32(np.int32(np.int64(h) << 16))


@numba.njit(**_JIT)
def f32_to_bf16(x):
    """f32 to bf16 bits, round to nearest even; NaN stays a quiet NaN."""
    u = np.int64(f32_as_i32(x)) & 0xFFFFFFFF
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    quiet = (u >> 16) | 0x40
    return np.uint16(quiet if (u & 0x7FFFFFFF) > 0x7F800000 else rounded)


@numba.njit(**_JIT)
def round_f16(x):
    """An f32 value rounded to f16 and back: a named f16 value as it is bound."""
    return f16_to_f32(f32_to_f16(x))


@numba.njit(**_JIT)
def round_bf16(x):
    """An f32 value rounded to bf16 and back: a named bf16 value as it is bound."""
    return bf16_to_f32(f32_to_bf16(x))


@numba.njit(**_JIT)
def narrow_f64(x):
    """f64 to f32 rounded to odd: rounding the result to a half type again is exact RNE."""
    y = np.float32(x)
    wide = np.float64(y)
    bits = np.int64(f32_as_i32(y))
    bits = bits - 1 if abs(wide) > abs(x) else bits  # step back toward zero: truncation
    odd = i32_as_f32(np.int32(bits | 1))
    return y if (wide == x or x != x) else odd


# ---------------------------------------------------------------------------- numerics


@numba.njit(**_JIT)
def to_i32(x):
    """Float to i32: truncate toward zero, saturate, NaN to 0 (the language's cast)."""
    if x != x:
        return np.int32(0)
    if x >= 2147483647.0:
        return np.int32(2147483647)
    if x <= -2147483648.0:
        return np.int32(-2147483648)
    return np.int32(x)


@numba.njit(**_JIT)
def _exp_reduced(t, r):
    """2^t e^r for an integral t and |r| <= ln 2 / 2: the polynomial of exp_f32 and exp_sum_f32."""
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    # 2^t as two factors, each a normal float, so the product overflows and underflows
    # (to subnormals) exactly where exp does
    n = np.int32(t)
    h = np.int32(n >> 1)
    scale_a = i32_as_f32(np.int32((h + 127) << 23))
    scale_b = i32_as_f32(np.int32((n - h + 127) << 23))
    return p * scale_a * scale_b


@numba.njit(**_JIT)
def exp_f32(x):
    """exp on f32 without a libm call (vectorizes); < 1 ulp where the result is normal."""
    xc = np.minimum(np.maximum(x, np.float32(-104.0)), np.float32(89.0))
    t = np.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = xc - t * np.float32(0.693359375) - t * np.float32(-2.12194440e-4)
    y = _exp_reduced(t, r)
    return x if x != x else y


@numba.njit(**_JIT)
def exp_sum_f32(hi, lo):
    """exp(hi + lo) without rounding the sum to f32, for a ``lo`` of at most about 1 (gelu_f32's is under half an ulp
    of hi): hi's reduction by t ln 2 is exact for any f32 hi (ln 2's upper part has 9 bits, and hi lies within a
    factor 2 of t ln 2), then lo joins the small remainder. As exp_f32 where the sum is clamped or NaN."""
    s = hi + lo
    xc = np.minimum(np.maximum(s, np.float32(-104.0)), np.float32(89.0))
    clamped = xc != s
    hi = xc if clamped else hi
    lo = np.float32(0.0) if clamped else lo
    t = np.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = hi - t * np.float32(0.693359375) + lo - t * np.float32(-2.12194440e-4)
    y = _exp_reduced(t, r)
    return s if s != s else y


@numba.njit(**_JIT)
def _erfc_fit(t):
    """Numerical Recipes' erfcc fit: erfc(z) = t exp(_erfc_fit(t) - z^2) for t = 1 / (1 + z / 2), z >= 0, with a
    fractional error below 1.2e-7 (the CUDA helper cvl_gelu uses it too); f64."""
    p = 0.17087277
    p = p * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    return p * t - 1.26551223


@numba.njit(**_JIT)
def exp2_f32(x):
    """2^x on f32 without a libm call (vectorizes): 2^t e^r for t = x rounded and r = (x - t) ln 2 (x - t exact, the
    product in f64), by exp_f32's polynomial; < 1 ulp where the result is normal, exact at integers; overflows to
    inf above 128 and underflows through the subnormals to 0 as exp2 does."""
    xc = np.minimum(np.maximum(x, np.float32(-152.0)), np.float32(129.0))
    t = np.floor(xc + np.float32(0.5))
    r = np.float32((np.float64(xc) - np.float64(t)) * 0.6931471805599453)
    y = _exp_reduced(t, r)
    return x if x != x else y


@numba.njit(**_JIT)
def _log_parts(x):
    """(e, log m) with x = m 2^e and m in [sqrt(1/2), sqrt(2)), log m in f64 (relative error about 1e-15), for a
    positive finite f32 x (a subnormal is scaled by 2^24 first). log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <=
    0.172, by its series to s^13 (the rest is below 2e-12 of it)."""
    sub = x < np.float32(1.1754943508222875e-38)
    b = f32_as_i32(x * np.float32(16777216.0) if sub else x)
    e = np.float64((b >> 23) - (151 if sub else 127))
    m = np.float64(i32_as_f32(np.int32((b & 0x007FFFFF) | 0x3F800000)))
    big = m > 1.4142135623730951
    m = m * 0.5 if big else m
    e = e + 1.0 if big else e
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    q = 1.0 / 13.0
    q = q * z + 1.0 / 11.0
    q = q * z + 1.0 / 9.0
    q = q * z + 1.0 / 7.0
    q = q * z + 1.0 / 5.0
    q = q * z + 1.0 / 3.0
    return e, 2.0 * s + 2.0 * s * z * q


@numba.njit(**_JIT)
def _log_special(x):
    """log of what _log_parts does not take: 0 -> -inf, negative -> NaN, +inf and NaN themselves."""
    return np.float32(-np.inf) if x == np.float32(0.0) else (np.float32(np.nan) if x < np.float32(0.0) else x)


@numba.njit(**_JIT)
def log_f32(x):
    """Natural log on f32 without a libm call (vectorizes): e ln 2 + log m in f64, rounded once (within 0.5 ulp and a
    hair). 0 -> -inf, negative -> NaN, +inf -> +inf, NaN -> NaN."""
    e, lm = _log_parts(x)
    ok = (x > np.float32(0.0)) & (x < np.float32(np.inf))
    return np.float32(e * 0.6931471805599453 + lm) if ok else _log_special(x)


@numba.njit(**_JIT)
def log2_f32(x):
    """log2 on f32 without a libm call: e + log m / ln 2 in f64, rounded once; specials as log_f32."""
    e, lm = _log_parts(x)
    ok = (x > np.float32(0.0)) & (x < np.float32(np.inf))
    return np.float32(e + lm * 1.4426950408889634) if ok else _log_special(x)


@numba.njit(**_JIT)
def tanh_f32(x):
    """tanh on f32 without a libm call (libm's tanhf is a scalar call, about 35 ns an element, and keeps the loop
    from vectorizing). Below |x| = 0.625, x times a polynomial in x^2 fitted to tanh(x) / x (relative error below
    2e-10, evaluated in f64); above, 1 - 2 / (e^(2|x|) + 1) with exp_f32, the rest in f64 (tanh is above 0.55
    there, so the subtraction loses nothing). Within 1.5 ulp of float64's tanh rounded; -0 stays -0, +-inf gives
    +-1, NaN stays NaN."""
    d = np.float64(x)
    u = d * d
    p = 0.0021422360664776867
    p = p * u - 0.008176164405377419
    p = p * u + 0.021699897350439458
    p = p * u - 0.0539465078584495
    p = p * u + 0.13333201986924717
    p = p * u - 0.3333333051912527
    p = p * u + 0.9999999999379141
    a = abs(x)
    big = 1.0 - 2.0 / (np.float64(exp_f32(a + a)) + 1.0)
    return np.float32(d * p if a < np.float32(0.625) else (big if x > np.float32(0.0) else -big))


@numba.njit(**_JIT)
def erf_f32(x):
    """erf on f32 without a libm call (libm's erf is a scalar call, about 21 ns an element). Below |x| = 0.75, x times
    a polynomial in x^2 fitted to erf(x) / x (relative error below 3e-11, in f64); above, 1 - erfc(|x|) by Numerical
    Recipes' fit (fractional error of erfc below 1.2e-7, which erfc <= 0.29 shrinks to under 1 ulp of erf), its
    exp by exp_f32 (the exponent's f32 rounding moves erfc by under 2e-6 of itself). Within 1.5 ulp of float64's
    erf rounded; -0 stays -0, +-inf gives +-1, NaN stays NaN."""
    d = np.float64(x)
    u = d * d
    p = 9.493053242794308e-05
    p = p * u - 0.0008361032298657999
    p = p * u + 0.005217074744571395
    p = p * u - 0.026864866008558568
    p = p * u + 0.11283780124191857
    p = p * u - 0.3761263854155418
    p = p * u + 1.1283791670838503
    a = abs(d)
    t = 1.0 / (1.0 + 0.5 * a)
    q = _erfc_fit(t)
    big = 1.0 - t * np.float64(exp_f32(np.float32(q - a * a)))
    return np.float32(d * p if a < 0.75 else (big if x > np.float32(0.0) else -big))


# 2/pi's bits after the binary point, 32 a word, behind a word of zeros (so a window may start up to 32 bits before
# the point): enough for any f32, whose largest exponent puts the window's end at bit 231
_TWO_OVER_PI = np.array([0x00000000, 0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041,
                         0xFE5163AB], dtype=np.int64)


@numba.njit(**_JIT)
def _quadrant(x):
    """(q, r): |x| = (4 k + q) pi / 2 + r, |r| <= pi / 4, r in f64, for an f32 x, by Payne and Hanek's reduction
    without branches (so a loop of it vectorizes): |x| = m 2^e with m of 24 bits, and only the bits of 2/pi from
    position e - 1 on matter modulo 4, so m times a 96-bit window of them (three products of at most 56 bits) gives
    |x| 2/pi modulo 4 with 64 bits of fraction, to within 2^-63. Below pi/4, q = 0 and r = |x| exactly. Not for
    inf or NaN (the callers select)."""
    b = np.int64(f32_as_i32(x)) & 0x7FFFFFFF
    ex = b >> 23
    m = (b & 0x7FFFFF) | (0x800000 if ex > 0 else 0)
    e = np.minimum(np.maximum(np.maximum(ex, 1) - 150, -24), 104)  # |x| = m 2^e; clamped where r = |x| or NaN
    p0 = e + 30  # the window's first bit (2/pi's bit e - 1) in the table
    j = p0 >> 5
    o = p0 & 31
    w0 = ((_TWO_OVER_PI[j] << o) | (_TWO_OVER_PI[j + 1] >> (32 - o))) & 0xFFFFFFFF
    w1 = ((_TWO_OVER_PI[j + 1] << o) | (_TWO_OVER_PI[j + 2] >> (32 - o))) & 0xFFFFFFFF
    w2 = ((_TWO_OVER_PI[j + 2] << o) | (_TWO_OVER_PI[j + 3] >> (32 - o))) & 0xFFFFFFFF
    lo = m * w2
    mid = m * w1 + (lo >> 32)
    hi = m * w0 + (mid >> 32)
    # m w = hi 2^64 + (mid mod 2^32) 2^32 + (lo mod 2^32), and |x| 2/pi = m w / 2^94 (mod 4)
    f = ((hi & 0x3FFFFFFF) << 34) | ((mid & 0xFFFFFFFF) << 2) | ((lo & 0xFFFFFFFF) >> 30)  # fraction, 2^64 units
    q = ((hi >> 30) + ((f >> 63) & 1)) & 3  # the quadrant, rounded to the nearest
    r = np.float64(f) * 8.515303950216931e-20  # f as signed (the quadrant rounded up: negative) times pi/2 / 2^64
    small = b < 0x3F490FDB  # |x| < pi/4
    return (np.int64(0) if small else q), (np.float64(abs(x)) if small else r)


@numba.njit(**_JIT)
def _sin_cos_poly(r):
    """(sin r, cos r) in f64 for |r| <= pi/4: Taylor to r^13 and r^14 (the next terms are under 3e-14 and 1e-15)."""
    z = r * r
    s = -1.0 / 6227020800.0
    s = s * z + 1.0 / 39916800.0
    s = s * z - 1.0 / 362880.0
    s = s * z + 1.0 / 5040.0
    s = s * z - 1.0 / 120.0
    s = s * z + 1.0 / 6.0
    c = 1.0 / 87178291200.0
    c = c * z - 1.0 / 479001600.0
    c = c * z + 1.0 / 3628800.0
    c = c * z - 1.0 / 40320.0
    c = c * z + 1.0 / 720.0
    c = c * z - 1.0 / 24.0
    c = c * z + 0.5
    return r - r * z * s, 1.0 - z * c


@numba.njit(**_JIT)
def sin_f32(x):
    """sin on f32 without a libm call (libm's sinf is a scalar call and keeps the loop from vectorizing): _quadrant's
    reduction, then _sin_cos_poly in f64, rounded once; within 1 ulp of float64's sin rounded, over all 2^32 floats
    (benchmarks/cpu_sincos_exhaustive.py). -0 stays -0; +-inf and NaN give NaN."""
    q, r = _quadrant(x)
    sr, cr = _sin_cos_poly(r)
    v = cr if q & 1 else sr
    v = -v if q & 2 else v
    v = -v if f32_as_i32(x) < 0 else v
    return np.float32(v) if abs(x) < np.float32(np.inf) else x - x


@numba.njit(**_JIT)
def cos_f32(x):
    """cos on f32 without a libm call, as sin_f32: within 1 ulp of float64's cos rounded; +-inf and NaN give NaN."""
    q, r = _quadrant(x)
    sr, cr = _sin_cos_poly(r)
    v = sr if q & 1 else cr
    v = -v if (q + 1) & 2 else v
    return np.float32(v) if abs(x) < np.float32(np.inf) else x - x


@numba.njit(**_JIT)
def relu_f32(x):
    return fmaximum(x, np.float32(0.0))


@numba.njit(**_JIT)
def relu_f64(x):
    return fmaximum(x, 0.0)


@numba.njit(**_JIT)
def rsqrt_f32(x):
    return np.float32(1.0) / np.sqrt(x)


@numba.njit(**_JIT)
def rsqrt_f64(x):
    return 1.0 / np.sqrt(x)


@numba.njit(**_JIT)
def sigmoid_f32(x):
    return np.float32(1.0) / (np.float32(1.0) + exp_f32(-x))


@numba.njit(**_JIT)
def sigmoid_f64(x):
    return 1.0 / (1.0 + np.exp(-x))


@numba.njit(**_JIT)
def silu_f32(x):
    return x * sigmoid_f32(x)


@numba.njit(**_JIT)
def silu_f64(x):
    return x * sigmoid_f64(x)


@numba.njit(**_JIT)
def gelu_f32(x):
    """x Phi(x), with Phi(-|x|) = erfc(|x| / sqrt 2) / 2 by Numerical Recipes' fit (fractional error below 1.2e-7),
    as the CUDA helper cvl_gelu: 0.5 x (1 + erf) loses every digit below x = -4 in f32, and libm's erff is a
    scalar call that keeps the loop from vectorizing. The fit's exponent is computed in f64 (x^2 exact) and
    enters the exp as two f32 parts, never rounded to one."""
    a = np.float64(abs(x))
    t = 1.0 / (1.0 + a * 0.35355339059327373)
    p = _erfc_fit(t)
    e = fmaximum(p - 0.5 * a * a, -110.0)  # exp underflows below -104; NaN stays NaN
    hi = np.float32(e)
    lo = np.float32(e - np.float64(hi))
    h = np.float32(0.5) * np.float32(t) * exp_sum_f32(hi, lo)
    # h = Phi(-|x|); NaN in, NaN out; gelu(-inf) is NaN, as 0.5 x (1 + erf) is
    return x * (np.float32(1.0) - h) if x > np.float32(0.0) else x * h


@numba.njit(**_JIT)
def gelu_f64(x):
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


@numba.njit(**_JIT)
def gelu_tanh_f32(x):
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1.0) + tanh_f32(inner))


@numba.njit(**_JIT)
def gelu_tanh_f64(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
