"""Rounding rules shared by the reference, the inputs and every backend."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvil_dsl.types import DType, cast_to_i32, round_to


def _exact_bf16(x: float) -> float:
    """Round-to-nearest-even to 8 significant bits, by brute force over the two neighbours."""
    if not np.isfinite(x) or x == 0:
        return float(np.float32(x))
    lo = float(np.asarray(np.float32(x)).astype(ml_dtypes.bfloat16))
    cands = {lo, float(np.nextafter(np.asarray(lo, ml_dtypes.bfloat16), np.asarray(np.inf, ml_dtypes.bfloat16))),
             float(np.nextafter(np.asarray(lo, ml_dtypes.bfloat16), np.asarray(-np.inf, ml_dtypes.bfloat16)))}
    best = min(cands, key=lambda c: (abs(c - x), np.asarray(c, ml_dtypes.bfloat16).view(np.uint16) & 1))
    return best


def test_bf16_rounds_once_from_float64():
    x = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-30)])
    assert round_to(x, DType.BF16).astype(np.float64).tolist() == [1.0078125, 1.0, 1.015625, -1.0078125]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-1e30, max_value=1e30, allow_nan=False))
def test_bf16_matches_brute_force(x):
    assert float(round_to(np.array([x]), DType.BF16)[0]) == _exact_bf16(x)


def test_weak_scalars_saturate():
    assert float(round_to(-1e9, DType.F16, saturate=True)) == -65504.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rounding past f16's range is inf by definition: no RuntimeWarning
        assert np.isinf(float(round_to(-1e9, DType.F16)))
        assert np.isinf(round_to(np.array([1e6, -1e6]), DType.F16)).all()


def test_float_to_i32_truncates_saturates_and_maps_nan_to_zero():
    got = cast_to_i32(np.array([2.9, -2.9, 1e12, -1e12, np.nan]))
    assert got.tolist() == [2, -2, 2**31 - 1, -(2**31), 0]
