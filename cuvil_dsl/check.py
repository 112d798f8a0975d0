"""Comparing a backend's results with the float64 reference (LANGUAGE.md section 7, Check).

A result passes when ``|out - ref| <= atol * max(1, max|ref|) + rtol * |ref|`` element by
element, ``ref`` being the reference rounded to the result's dtype. NaN matches NaN and an
infinity the same infinity, position by position. i32 and bool compare exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuvil_dsl.types import DType

DEFAULT_TOLERANCES: dict[DType, tuple[float, float]] = {
    DType.F16: (1e-3, 1e-3),
    DType.BF16: (8e-3, 8e-3),
    DType.F32: (1e-5, 1e-5),
    DType.F64: (1e-7, 1e-7),
    DType.I32: (0.0, 0.0),
    DType.BOOL: (0.0, 0.0),
}
TF32_TOLERANCE = (1e-3, 1e-3)


def tolerances(dtype: DType, rtol: float | None, atol: float | None, tf32: bool = False) -> tuple[float, float]:
    """Defaults by dtype; a spec's ``rtol`` or ``atol`` replaces only the one it names."""
    d_rtol, d_atol = TF32_TOLERANCE if (tf32 and dtype is DType.F32) else DEFAULT_TOLERANCES[dtype]
    if not dtype.is_float:
        return 0.0, 0.0
    return (d_rtol if rtol is None else rtol), (d_atol if atol is None else atol)


@dataclass(frozen=True)
class Comparison:
    name: str
    passed: bool
    max_abs: float
    max_rel: float
    rtol: float
    atol: float
    mismatches: int
    first_mismatch: tuple[int, ...] | None

    def to_json(self) -> dict:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "rtol": self.rtol, "atol": self.atol}

    def describe(self) -> str:
        if self.passed:
            return f"{self.name}: ok (max_abs={self.max_abs:.3g}, max_rel={self.max_rel:.3g})"
        where = f" first at index {self.first_mismatch}" if self.first_mismatch is not None else ""
        return (
            f"{self.name}: {self.mismatches} element(s) outside rtol={self.rtol:g} atol={self.atol:g}{where} "
            f"(max_abs={self.max_abs:.3g}, max_rel={self.max_rel:.3g})"
        )


def compare(name: str, out: np.ndarray, ref: np.ndarray, dtype: DType, rtol: float, atol: float) -> Comparison:
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return Comparison(name, False, float("inf"), float("inf"), rtol, atol, int(ref.size), None)
    if not dtype.is_float:
        bad = out != ref
        n_bad = int(np.count_nonzero(bad))
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        max_abs = float(diff.max()) if diff.size else 0.0
        first = tuple(int(i) for i in np.argwhere(bad)[0]) if n_bad else None
        return Comparison(name, n_bad == 0, max_abs, max_abs, 0.0, 0.0, n_bad, first)
    o = out.astype(np.float64)
    r = ref.astype(np.float64)
    nan_o, nan_r = np.isnan(o), np.isnan(r)
    inf_r = np.isinf(r)
    finite = ~nan_r & ~inf_r
    scale = max(1.0, float(np.max(np.abs(r[finite]))) if finite.any() else 1.0)
    with np.errstate(invalid="ignore"):
        diff = np.abs(o - r)
        ok = np.where(finite, diff <= atol * scale + rtol * np.abs(r), False)
    ok |= nan_o & nan_r
    ok |= inf_r & (o == r)
    both_finite = finite & np.isfinite(o)
    max_abs = float(diff[both_finite].max()) if both_finite.any() else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff[both_finite] / np.maximum(np.abs(r[both_finite]), np.finfo(np.float64).tiny)
    max_rel = float(rel.max()) if rel.size else 0.0
    bad = ~ok
    n_bad = int(np.count_nonzero(bad))
    if np.any(bad & ~both_finite):  # a NaN or infinity where the reference has none (or vice versa)
        max_abs = float("inf")
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if n_bad else None
    return Comparison(name, n_bad == 0, max_abs, max_rel, rtol, atol, n_bad, first)
