"""The CUDA prelude's formulas against float64, emulated in float32 with NumPy (no GPU needed)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cuvil_dsl.codegen.cuda_lang import PRELUDE

F = np.float32


def _gelu_body() -> str:
    start = PRELUDE.index("__device__ __forceinline__ float cvl_gelu(float x)")
    return PRELUDE[start:PRELUDE.index("\n}\n", start)]


def _coefficients() -> list[float]:
    """The polynomial of the shipped cvl_gelu, highest degree first (read from the prelude's text): the
    fit's coefficients times log2(e), the constant one less."""
    body = _gelu_body()
    first = re.search(r"float p = fmaf\(t, ([-0-9.e]+)f, ([-0-9.e]+)f\);", body)
    rest = re.findall(r"p = fmaf\(t, p, ([-0-9.e]+)f\);", body)
    return [float(first.group(1)), float(first.group(2)), *map(float, rest)]


def _fma(a, b, c):
    """fmaf: the exact a * b + c, rounded once (float64 holds the product of two float32 exactly)."""
    return (a.astype(np.float64) * b.astype(np.float64) + np.asarray(c, np.float64)).astype(F)


def _gelu32(x: np.ndarray) -> np.ndarray:
    """cvl_gelu step by step in float32; the MUFU's rcp.approx and ex2.approx as correctly rounded."""
    c = [F(v) for v in _coefficients()]
    a = np.abs(x).astype(F)
    t = (1.0 / _fma(a, np.full_like(a, F(0.35355339059327373)), F(1.0)).astype(np.float64)).astype(F)
    p = _fma(t, np.full_like(t, c[0]), c[1])
    for v in c[2:]:
        p = _fma(t, p, v)
    u = _fma((-a * F(0.72134752044448169)).astype(F), a, p)
    e = np.exp2(u.astype(np.float64)).astype(F)
    h = (t * e).astype(F)
    with np.errstate(invalid="ignore"):
        return (x * np.where(x > 0, (F(1.0) - h).astype(F), h)).astype(F)


def _exact(x: np.ndarray) -> np.ndarray:
    erfc = np.frompyfunc(math.erfc, 1, 1)
    x64 = x.astype(np.float64)
    return x64 * 0.5 * erfc(-x64 / math.sqrt(2.0)).astype(np.float64)


def test_gelu_polynomial_is_the_numerical_recipes_erfc_fit():
    fit = [0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
           1.00002368, -1.26551223]  # Numerical Recipes' erfcc, highest degree first
    want = [c / math.log(2.0) for c in fit]
    want[-1] -= 1.0
    assert _coefficients() == pytest.approx(want, rel=1e-8)


@pytest.mark.parametrize("lo,hi,bound", [(-14.0, -4.0, 2.5e-5), (-4.0, -1.0, 2.5e-6), (-1.0, 1.0, 6e-7),
                                         (1.0, 4.0, 2.5e-7), (4.0, 14.0, 2e-7)])
def test_gelu_f32_error_bounds(lo, hi, bound):
    """The prelude's comment: relative error against float64 below 5e-7 for |x| < 1, 2e-6 down to
    x = -4, 2e-5 below (emulated; the MUFU's own approximation adds about 2^-22)."""
    x = np.linspace(lo, hi, 200_001).astype(F)
    want = _exact(x)
    keep = np.abs(want) > 1e-30  # past that float32 flushes (ex2.approx.ftz)
    rel = np.abs(_gelu32(x).astype(np.float64) - want)[keep] / np.abs(want[keep])
    assert rel.max() < bound


def test_gelu_special_values_follow_the_formula():
    """NaN stays NaN, gelu(inf) = inf, gelu(-inf) = NaN (0.5 x (1 + erf(x / sqrt 2)) is -inf * 0 there,
    as NumPy computes it), gelu(0) = 0, and large negative x underflow to (minus) zero."""
    got = _gelu32(np.array([np.nan, np.inf, -np.inf, 0.0, -40.0, 40.0], F))
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2])
    assert got[3] == 0.0 and got[4] == 0.0 and got[5] == F(40.0)
