"""The numba helpers of generated kernels, against NumPy and ml_dtypes, exhaustively where it is cheap."""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest

from cuvil_dsl.codegen import cpu_prelude as cvl
from cuvil_dsl.types import DType, cast_to_i32, round_to


def _mapped(helper, out_dtype):
    """An njit loop applying ``helper`` to every element (the way kernels call it)."""

    @numba.njit
    def run(values):
        out = np.empty(values.size, out_dtype)
        for i in range(values.size):
            out[i] = helper(values[i])
        return out

    return run


F32_SAMPLES = np.concatenate([
    np.random.default_rng(0).integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32),
    np.arange(0x33000000, 0x38900000, 97, dtype=np.uint32),  # f16 subnormals and the normal boundary
    np.arange(0x477F0000, 0x47810000, dtype=np.uint32),  # around the f16 overflow threshold
    np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF], dtype=np.uint32),
]).view(np.float32)


def _same_bits_or_both_nan(got: np.ndarray, want: np.ndarray) -> None:
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    bad = (got.view(np.uint16) != want.view(np.uint16)) & ~(np.isnan(wide_got) & np.isnan(wide_want))
    assert not bad.any(), f"{int(bad.sum())} differ, first at input {F32_SAMPLES[bad][:3]}"


def test_half_to_f32_is_exact_for_every_bit_pattern():
    every = np.arange(2**16, dtype=np.uint64).astype(np.uint16)
    f16 = _mapped(cvl.f16_to_f32, np.float32)(every)
    assert np.array_equal(f16.view(np.uint32), every.view(np.float16).astype(np.float32).view(np.uint32))
    bf16 = _mapped(cvl.bf16_to_f32, np.float32)(every)
    assert np.array_equal(bf16.view(np.uint32), every.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32))


def test_f32_to_half_rounds_to_nearest_even_like_numpy_and_ml_dtypes():
    with np.errstate(all="ignore"):
        want_f16 = F32_SAMPLES.astype(np.float16)
        want_bf16 = F32_SAMPLES.astype(ml_dtypes.bfloat16)
    _same_bits_or_both_nan(_mapped(cvl.f32_to_f16, np.uint16)(F32_SAMPLES).view(np.float16), want_f16)
    _same_bits_or_both_nan(_mapped(cvl.f32_to_bf16, np.uint16)(F32_SAMPLES).view(ml_dtypes.bfloat16), want_bf16)


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_f64_to_half_rounds_once(dtype):
    # values just off a half-type tie: rounding through plain f32 would land on the tie and round wrongly
    rng = np.random.default_rng(1)
    ulp = 2.0**-10 if dtype is DType.F16 else 2.0**-7
    near_ties = (rng.integers(-2000, 2000, 20000) + 0.5) * ulp * (1 + rng.choice([-1, 1], 20000) * 2.0**-40)
    values = np.concatenate([near_ties, rng.normal(size=20000) * 1e3, [np.nan, np.inf, -np.inf, 1e300, -1e-300]])
    rounding = cvl.round_f16 if dtype is DType.F16 else cvl.round_bf16

    @numba.njit
    def narrowed(x):
        out = np.empty(x.size, np.float32)
        for i in range(x.size):
            out[i] = rounding(cvl.narrow_f64(x[i]))
        return out

    with np.errstate(all="ignore"):
        want = round_to(values, dtype).astype(np.float32)
    got = narrowed(values)
    assert np.array_equal(got, want, equal_nan=True)


def test_float_to_i32_truncates_saturates_and_sends_nan_to_zero():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 2147483520.0, -2147483648.0, 0.0], np.float32)
    for values in (x, x.astype(np.float64)):
        assert np.array_equal(_mapped(cvl.to_i32, np.int32)(values), cast_to_i32(values))


def test_exp_f32_is_within_one_ulp_on_the_normal_range_and_exact_at_the_edges():
    x = np.linspace(-87.0, 88.7, 1_000_003).astype(np.float32)
    got = _mapped(cvl.exp_f32, np.float32)(x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 1.0
    edges = np.array([np.nan, np.inf, -np.inf, 89.0, -110.0, 0.0], np.float32)
    assert np.array_equal(_mapped(cvl.exp_f32, np.float32)(edges), [np.nan, np.inf, 0.0, np.inf, 0.0, 1.0],
                          equal_nan=True)


def test_exp_sum_f32_keeps_the_low_part_and_is_exp_f32_without_it():
    """exp(hi + lo) of an exact hi and a small lo, as gelu_f32 takes its exponent: within 1.5 ulp of the f64 exp of
    the unrounded sum where the result is normal (a sum rounded to f32 first is off by up to hi's ulp, 4e-6 at
    -85), and bit for bit exp_f32 where lo is 0."""
    rng = np.random.default_rng(3)
    hi = rng.uniform(-86.0, 88.0, 1_000_000).astype(np.float32)
    lo = (rng.uniform(-1.0, 1.0, hi.size) * np.spacing(hi) * 64).astype(np.float32)

    @numba.njit(error_model="numpy")
    def run(h, l):
        out = np.empty(h.size, np.float32)
        for i in range(h.size):
            out[i] = cvl.exp_sum_f32(h[i], l[i])
        return out

    want = np.exp(hi.astype(np.float64) + lo.astype(np.float64))
    ok = (want > 1.2e-38) & (want < 3.4e38)
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.max((np.abs(run(hi, lo).astype(np.float64) - want) / ulp)[ok]) <= 1.5
    zero = np.zeros_like(hi)
    assert np.array_equal(run(hi, zero), _mapped(cvl.exp_f32, np.float32)(hi))
    edges = np.array([np.nan, np.inf, -np.inf, 120.0, -120.0], np.float32)
    assert np.array_equal(run(edges, np.zeros_like(edges)), [np.nan, np.inf, 0.0, np.inf, 0.0], equal_nan=True)


def test_gelu_f32_keeps_its_relative_accuracy_for_negative_inputs():
    """x Phi(x) within 5 ulp of float64's wherever the result is a normal float down to x = -12 (0.5 x (1 + erf)
    in f32, the helper before session 17, was off by 1e-3 at x = -4 and by 100% below -6), and the special values
    of the reference's formula."""
    import math

    x = np.linspace(-12.0, 12.0, 2_000_001).astype(np.float32)
    got = _mapped(cvl.gelu_f32, np.float32)(x).astype(np.float64)
    want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    normal = np.abs(want) >= 1.1754944e-38
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.max((np.abs(got - want) / ulp)[normal]) <= 5.0
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, -1e-30], np.float32)
    got = _mapped(cvl.gelu_f32, np.float32)(specials)
    want = np.array([np.nan, np.inf, np.nan, 0.0, -0.0, 3e38, -0.0, -5e-31], np.float32)
    numbers = ~np.isnan(want)  # the zeros' signs too; a NaN's sign means nothing
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


@pytest.mark.parametrize("name", ["tanh", "erf"])
def test_tanh_and_erf_f32_are_within_one_and_a_half_ulp(name):
    """The prelude's tanh_f32 and erf_f32 (vectorizable, unlike libm's scalar calls) against float64's, rounded
    nowhere: within 1.5 ulp on a million random f32 bit patterns and a dense sweep of [-10, 10] (where the two
    formulas meet, 0.625 and 0.75, included), and the special values: -0 stays -0, +-inf gives +-1, NaN stays NaN."""
    import math

    exact = {"tanh": math.tanh, "erf": math.erf}[name]
    run = _mapped(getattr(cvl, f"{name}_f32"), np.float32)
    sweep = np.linspace(-10.0, 10.0, 2_000_001).astype(np.float32)
    edges = np.float32([0.625, 0.75])
    near = (edges[:, None] + np.arange(-500, 501)[None, :] * np.spacing(edges)[:, None]).ravel().astype(np.float32)
    x = np.concatenate([F32_SAMPLES[np.isfinite(F32_SAMPLES)], sweep, near, -near])
    got = run(x).astype(np.float64)
    want = np.array([exact(v) for v in x.astype(np.float64)])
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got - want) / ulp
    assert np.max(err) <= 1.5, f"{np.max(err):.2f} ulp at x = {x[np.argmax(err)]!r}"
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e38], np.float32)
    got = run(specials)
    want = np.array([0.0, -0.0, 1.0, -1.0, np.nan, exact(float(np.float32(1e-45))), -1.0], np.float32)
    numbers = ~np.isnan(want)
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


def test_exp2_log_and_log2_f32_are_within_an_ulp():
    """The prelude's exp2_f32, log_f32 and log2_f32 (vectorizable, unlike libm's exp2f, logf and log2f) against
    float64's: exp2 within 1 ulp wherever the result is normal and exact at the integers; log and log2 within 0.6
    ulp of every positive f32 (subnormals included: a million random bit patterns, the sweep around 1, where the
    mantissa's reduction switches at sqrt 2), and the special values."""
    x = F32_SAMPLES[np.isfinite(F32_SAMPLES)]
    sweep = np.linspace(-160.0, 130.0, 1_000_001).astype(np.float32)
    e = np.concatenate([x[np.abs(x) < 200], sweep])
    got = _mapped(cvl.exp2_f32, np.float32)(e).astype(np.float64)
    want = np.exp2(e.astype(np.float64))
    normal = (want >= 1.1754943508222875e-38) & (want <= 3.4028234663852886e38)
    ulp = np.spacing(want[normal].astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[normal] - want[normal]) / ulp) <= 1.0
    ints = np.arange(-149, 128).astype(np.float32)
    assert np.array_equal(_mapped(cvl.exp2_f32, np.float32)(ints), np.exp2(ints.astype(np.float64)).astype(np.float32))
    specials = np.array([np.nan, np.inf, -np.inf, 128.0, -160.0, 0.0, -0.0], np.float32)
    assert np.array_equal(_mapped(cvl.exp2_f32, np.float32)(specials), [np.nan, np.inf, 0.0, np.inf, 0.0, 1.0, 1.0],
                          equal_nan=True)
    one = np.float32(1.0)
    near_one = (one + np.arange(-3000, 3001) * np.spacing(one) / 2).astype(np.float32)
    root = np.float32(np.sqrt(2.0))
    near_root = (root + np.arange(-500, 501) * np.spacing(root)).astype(np.float32)
    positive = np.concatenate([np.abs(x[x != 0]), near_one, near_root, np.float32([1e-45, 3.4028235e38])])
    for name, exact in (("log", np.log), ("log2", np.log2)):
        run = _mapped(getattr(cvl, f"{name}_f32"), np.float32)
        got = run(positive).astype(np.float64)
        want = exact(positive.astype(np.float64))
        ulp = np.maximum(np.spacing(np.abs(want).astype(np.float32)).astype(np.float64), 1e-45)
        err = np.abs(got - want) / ulp
        assert np.max(err) <= 0.6, f"{name}: {np.max(err):.3f} ulp at x = {positive[np.argmax(err)]!r}"
        assert run(np.float32([1.0]))[0] == 0.0
        got = run(np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan], np.float32))
        assert np.array_equal(got, [-np.inf, -np.inf, np.nan, np.inf, np.nan, np.nan], equal_nan=True)


def test_sin_and_cos_f32_are_within_an_ulp_over_the_whole_range():
    """The prelude's sin_f32 and cos_f32 (a branch-free Payne-Hanek reduction, so loops vectorize; libm's sinf and
    cosf are scalar calls) within 1 ulp of float64's rounded to f32, counted in representable floats: on a million
    random f32 bit patterns (every exponent, up to 3.4e38), on floats next to multiples of pi/2 from 1 to 2^40
    (where the reduction cancels most), and around pi/4 (where the reduction starts). Checked over all 2^32 floats
    when written (`benchmarks/NOTES.md`, CPU section). -0 stays -0 for sin; +-inf and NaN give NaN."""
    k = np.unique(np.concatenate([np.arange(1, 5000), np.round(np.geomspace(5000, 2.0**40, 3000))]))
    centres = (k * (np.pi / 2)).astype(np.float32)
    near = (centres.astype(np.float64)[:, None] + np.arange(-8, 9)[None, :]
            * np.spacing(centres).astype(np.float64)[:, None]).astype(np.float32).ravel()
    quarter = np.float32(np.pi / 4)
    around = (quarter + np.arange(-300, 301) * np.spacing(quarter)).astype(np.float32)
    x = np.concatenate([F32_SAMPLES[np.isfinite(F32_SAMPLES)], near, -near, around, -around])

    def ordinal(v: np.ndarray) -> np.ndarray:  # the floats' order as integers (-0 and +0 both 0)
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    for name, exact in (("sin", np.sin), ("cos", np.cos)):
        run = _mapped(getattr(cvl, f"{name}_f32"), np.float32)
        got = run(x)
        want = exact(x.astype(np.float64)).astype(np.float32)
        off = np.abs(ordinal(got) - ordinal(want))
        assert off.max() <= 1, f"{name}: {off.max()} ulp at x = {x[np.argmax(off)]!r}"
        specials = run(np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32))
        assert np.isnan(specials[2:]).all()
        assert (specials[:2] == (0.0 if name == "sin" else 1.0)).all()
        assert np.array_equal(np.signbit(specials[:2]), [False, name == "sin"])


def test_extrema_propagate_nan_like_numpy():
    @numba.njit
    def extrema(a, b):
        return cvl.fmaximum(a, b), cvl.fminimum(a, b), cvl.relu_f32(a)

    for a, b in [(np.nan, 1.0), (1.0, np.nan), (2.0, 1.0), (-1.0, -np.inf)]:
        a32, b32 = np.float32(a), np.float32(b)
        got = extrema(a32, b32)
        want = (np.maximum(a32, b32), np.minimum(a32, b32), np.maximum(a32, np.float32(0)))
        assert np.array_equal(np.array(got), np.array(want), equal_nan=True)
