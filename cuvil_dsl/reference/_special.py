"""erf for float64 arrays: NumPy has none, so libm's erf is vectorised through numba."""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.vectorize(["float64(float64)"], cache=True)
def _erf(x):
    return math.erf(x)


def erf(x: np.ndarray) -> np.ndarray:
    return _erf(np.asarray(x, dtype=np.float64))
