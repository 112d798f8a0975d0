"""Dtypes, symbolic dimensions and the types of values (LANGUAGE.md section 3 and 5).

A tensor type is a dtype and a shape whose dimensions are positive ints or symbols. A weak
scalar (a literal, a scalar parameter or an expression of scalars only) has a kind, not a
dtype: it takes the dtype of the tensor it meets.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

import ml_dtypes
import numpy as np


class Kind(str, Enum):
    FLOAT = "float"
    INT = "int"
    BOOL = "bool"


class DType(str, Enum):
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    I32 = "i32"
    BOOL = "bool"

    @property
    def kind(self) -> Kind:
        if self in (DType.I32,):
            return Kind.INT
        if self is DType.BOOL:
            return Kind.BOOL
        return Kind.FLOAT

    @property
    def is_float(self) -> bool:
        return self.kind is Kind.FLOAT

    @property
    def itemsize(self) -> int:
        return {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i32": 4, "bool": 1}[self.value]

    @property
    def numpy(self) -> np.dtype:
        """The host array dtype for values of this dtype."""
        return np.dtype(_NUMPY[self])

    @property
    def compute(self) -> "DType":
        """The dtype elementwise math and accumulation run in (f32 for half types)."""
        return DType.F32 if self in (DType.F16, DType.BF16) else self

    @property
    def max_finite(self) -> float:
        return float(_FINFO[self])

    @staticmethod
    def parse(name: str) -> "DType | None":
        try:
            return DType(name)
        except ValueError:
            return None


_NUMPY = {
    DType.F16: np.float16,
    DType.BF16: ml_dtypes.bfloat16,
    DType.F32: np.float32,
    DType.F64: np.float64,
    DType.I32: np.int32,
    DType.BOOL: np.bool_,
}
_FINFO = {
    DType.F16: 65504.0,
    DType.BF16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    DType.F32: float(np.finfo(np.float32).max),
    DType.F64: float(np.finfo(np.float64).max),
}


def dtype_of_numpy(dt: np.dtype) -> DType | None:
    for d, n in _NUMPY.items():
        if np.dtype(n) == dt:
            return d
    return None


@dataclass(frozen=True, order=True)
class Sym:
    """A symbolic dimension such as ``M``; bound to a size by the spec or the inputs."""

    name: str

    def __str__(self) -> str:
        return self.name


Dim = Union[int, Sym]
Shape = tuple  # tuple[Dim, ...]


def dim_str(d: Dim) -> str:
    return str(d)


def shape_str(shape: Shape) -> str:
    return "[" + ", ".join(dim_str(d) for d in shape) + "]"


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: Shape

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def kind(self) -> Kind:
        return self.dtype.kind

    def __str__(self) -> str:
        return f"{self.dtype.value}{shape_str(self.shape)}"


@dataclass(frozen=True)
class ScalarType:
    """A weakly typed scalar: only its kind is fixed."""

    kind: Kind

    def __str__(self) -> str:
        return f"scalar<{self.kind.value}>"


Type = Union[TensorType, ScalarType]


def concrete_shape(shape: Shape, sizes: dict[str, int]) -> tuple[int, ...]:
    """Resolve symbols with ``sizes``; KeyError if one is missing."""
    return tuple(d if isinstance(d, int) else sizes[d.name] for d in shape)


def symbols_of(shape: Shape) -> list[str]:
    return [d.name for d in shape if isinstance(d, Sym)]


def round_to(values: np.ndarray | float, dtype: DType, saturate: bool = False) -> np.ndarray:
    """Round float64 data to ``dtype`` (nearest even). With ``saturate``, out-of-range finite
    values clamp to the largest finite value instead of becoming infinite (weak scalars)."""
    arr = np.asarray(values)
    if dtype.is_float:
        if saturate:
            m = dtype.max_finite
            arr = np.where(np.isfinite(arr), np.clip(arr, -m, m), arr)
        if dtype is DType.BF16 and arr.dtype == np.float64:
            return _f64_to_bf16(arr)
        with np.errstate(over="ignore"):  # overflow to +-inf is the defined rounding, not a fault
            return arr.astype(dtype.numpy)
    if dtype is DType.I32:
        return cast_to_i32(arr)
    return arr.astype(bool)


def _f64_to_bf16(arr: np.ndarray) -> np.ndarray:
    """float64 to bf16, rounded once to nearest even.

    Going through float32 rounds twice: when the float32 value lands exactly on a bf16 tie
    but the float64 value was not a tie, nudge it one float32 ulp toward the true value first.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = arr.astype(np.float32)
    bits = f32.view(np.uint32)
    tie = ((bits & 0xFFFF) == 0x8000) & np.isfinite(f32) & (f32.astype(np.float64) != arr)
    if np.any(tie):
        toward = np.where(arr > f32.astype(np.float64), np.float32(np.inf), np.float32(-np.inf))
        f32 = np.where(tie, np.nextafter(f32, toward), f32)
    return f32.astype(ml_dtypes.bfloat16)


def cast_to_i32(arr: np.ndarray) -> np.ndarray:
    """Float to i32: truncate toward zero, saturate, NaN to 0. Integers wrap modulo 2^32."""
    arr = np.asarray(arr)
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64).astype(np.int32)
    f = np.asarray(arr, dtype=np.float64)
    f = np.where(np.isnan(f), 0.0, np.trunc(f))
    f = np.clip(f, -(2.0**31), 2.0**31 - 1)
    return f.astype(np.int32)
