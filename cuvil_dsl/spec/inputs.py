"""The input arrays of a bound pipeline, the same on every machine.

**Generated inputs** (LANGUAGE.md section 7), for a parameter of concrete shape ``shape``:

1. ``rng = numpy.random.default_rng(seed)``: PCG64 seeded through ``SeedSequence(seed)``.
   The seed is the spec's ``seed``, else the parameter's position among all parameters
   (see :mod:`cuvil_dsl.spec.binding`).
2. One float64 draw of the whole shape, in C order:
   ``normal``: ``rng.normal(mean, std, size=shape)`` (defaults 0 and 1);
   ``uniform``: ``rng.uniform(low, high, size=shape)`` (defaults -1 and 1);
   ``zeros``, ``ones``: constants; ``arange``: 0, 1, ..., n-1 in C order.
3. Conversion to the declared dtype:
   ``f16 bf16 f32 f64``: rounded to nearest even (``astype``; ``ml_dtypes`` for bf16), values
   beyond the dtype's range becoming infinite;
   ``i32``: ``floor``, then saturated to [-2**31, 2**31 - 1];
   ``bool``: for ``normal`` and ``uniform`` the draw is instead ``rng.uniform(0, 1, size=shape)
   < 0.5`` (mean, std, low and high do not apply); ``zeros`` is all false, ``ones`` all true,
   ``arange`` is ``value != 0``.

PCG64's bit stream is fixed by its algorithm; the float64 methods above have not changed since
NumPy 1.17, and NumPy documents any change to a Generator stream (NEP 19). The tests pin the
first values of ``default_rng(0).normal`` so such a change cannot pass unnoticed.

**Files** are read with ``numpy.load(path, allow_pickle=False)``: object arrays are refused.
bf16 data comes as float32 (rounded to nearest even) or as uint16 bit patterns (reinterpreted).
"""

from __future__ import annotations

import math

import numpy as np

from cuvil_dsl.diagnostics import UserError, error
from cuvil_dsl.ir.nodes import Pipeline
from cuvil_dsl.spec.binding import Binding, FileSource, GeneratedSource, expected_file_dtypes
from cuvil_dsl.types import DType, TensorType, round_to


def make_inputs(binding: Binding, pipeline: Pipeline) -> dict[str, np.ndarray]:
    """One C-contiguous host array per tensor parameter, in declaration order, of its dtype
    (``DType.numpy``; bf16 is ``ml_dtypes.bfloat16``)."""
    arrays: dict[str, np.ndarray] = {}
    for param in pipeline.tensor_params:
        assert isinstance(param.type, TensorType)
        dtype = param.type.dtype
        shape = binding.shapes[param.name]
        source = binding.inputs[param.name]
        if isinstance(source, FileSource):
            arrays[param.name] = load_file(param.name, dtype, source)
        else:
            arrays[param.name] = generate(source, dtype, shape)
    return arrays


def generate(source: GeneratedSource, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Values for one generated input, exactly as the module docstring describes."""
    if source.init in ("normal", "uniform"):
        rng = np.random.default_rng(source.seed)
        if dtype is DType.BOOL:
            return rng.uniform(0.0, 1.0, size=shape) < 0.5
        if source.init == "normal":
            values = rng.normal(source.mean, source.std, size=shape)
        else:
            values = rng.uniform(source.low, source.high, size=shape)
    elif source.init == "arange":
        values = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    else:
        values = np.full(shape, 1.0 if source.init == "ones" else 0.0)
    if dtype is DType.I32:
        values = np.floor(values)  # then round_to saturates
    with np.errstate(over="ignore", invalid="ignore"):  # beyond the dtype's range is infinite, as documented
        return np.ascontiguousarray(round_to(values, dtype))


def load_file(name: str, dtype: DType, source: FileSource) -> np.ndarray:
    """The data of a ``.npy`` input, checked again against what its header said at binding."""
    where = f"`{name}` ({source.path.name})"
    try:
        array = np.load(source.path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - hostile bytes make NumPy raise many kinds (see binding)
        raise UserError([error("E506", f"cannot load {where}: {type(exc).__name__}: {exc}", source.span)]) from None
    if not isinstance(array, np.ndarray):
        array.close()  # an .npz archive
        raise UserError([error("E506", f"{where} is not a .npy file", source.span)])
    native = array.dtype.newbyteorder("=")
    if array.shape != source.shape or native != source.dtype:
        message = (
            f"{where} changed since the spec was bound: now {native.name}{list(array.shape)}, "
            f"expected {expected_file_dtypes(dtype)} {list(source.shape)}"
        )
        raise UserError([error("E506", message, source.span)])
    array = array.astype(native, copy=False)
    if dtype is DType.BF16:
        array = array.view(dtype.numpy) if native == np.uint16 else round_to(array, dtype)
    return np.ascontiguousarray(array)
