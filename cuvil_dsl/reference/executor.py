"""The float64 reference: a NumPy interpreter of the IR that *defines* the semantics.

Every backend is checked against it. Values are held as float64 (float dtypes), int32
(i32: arithmetic done in int64, wrapped modulo 2^32 after every op) and bool arrays; weak
scalars as Python numbers. A named value is rounded to its dtype when it is bound, exactly
as the GPU does, so results never depend on fusion. Reductions, softmax, norms and `@` are
computed in float64 (the GPU accumulates in f32, which the check tolerances absorb).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from cuvil_dsl.diagnostics import RunFailure
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.types import DType, Kind, ScalarType, TensorType, cast_to_i32, round_to

_SQRT2 = math.sqrt(2.0)
_GELU_TANH_C = math.sqrt(2.0 / math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    from cuvil_dsl.reference._special import erf

    return erf(np.asarray(x, dtype=np.float64))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


_FLOAT_UNARY: dict[str, Callable] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "erf": _erf,
    "sigmoid": _sigmoid,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / _SQRT2)),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(_GELU_TANH_C * (x + 0.044715 * x**3))),
    "silu": lambda x: x * _sigmoid(x),
}


def _wrap(x) -> np.ndarray:
    """int64 results to i32, modulo 2^32."""
    return np.asarray(x, dtype=np.int64).astype(np.int32)


def _relu(x):
    # NaN-propagating, as np.maximum.
    return np.maximum(x, np.zeros((), dtype=np.asarray(x).dtype))


def _binary(op: str, a, b, is_int: bool):
    if is_int and op in ("add", "sub", "mul"):
        a64, b64 = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        return _wrap({"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](a64, b64))
    fn = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
        "maximum": np.maximum, "minimum": np.minimum,
        "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or,
    }[op]
    return fn(a, b)


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _layernorm(x, w=None, b=None, eps=1e-5):
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _rmsnorm(x, w=None, eps=1e-6):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def to_compute(value: np.ndarray, dtype: DType) -> np.ndarray:
    """Host array of ``dtype`` to the reference's working representation."""
    if dtype.is_float:
        return np.asarray(value).astype(np.float64)
    if dtype is DType.I32:
        return np.asarray(value).astype(np.int32)
    return np.asarray(value).astype(bool)


def bind_round(value, dtype: DType) -> np.ndarray:
    """Round a working value to ``dtype`` and back to the working representation."""
    if dtype.is_float:
        return round_to(value, dtype).astype(np.float64)
    if dtype is DType.I32:
        return np.asarray(value).astype(np.int32)
    return np.asarray(value).astype(bool)


def _scalar_to_tensor(value, dtype: DType) -> np.ndarray:
    """A weak scalar meeting a tensor: rounded, saturating, to its dtype."""
    if dtype.is_float:
        return round_to(np.float64(value), dtype, saturate=True).astype(np.float64)
    if dtype is DType.I32:
        return np.asarray(np.clip(int(value), -(2**31), 2**31 - 1), dtype=np.int32)
    return np.asarray(bool(value))


def cast_value(x, dtype: DType) -> np.ndarray:
    arr = np.asarray(x)
    if dtype is DType.BOOL:
        return arr != 0
    if dtype is DType.I32:
        return cast_to_i32(arr)
    src = arr.astype(np.float64) if arr.dtype != np.float64 else arr
    with np.errstate(over="ignore"):
        return round_to(src, dtype).astype(np.float64)


def eval_op(op: ir.Op, env: Mapping[str, object]):
    """Evaluate one op in the reference semantics (scalar ops on Python numbers)."""
    args = [env[a] for a in op.args]
    kind = op.op
    scalar = isinstance(op.type, ScalarType)
    if kind == "const":
        return op.attr("value")
    if kind == "to_tensor":
        return _scalar_to_tensor(args[0], DType(op.attr("dtype")))
    if kind == "copy":
        return args[0]
    if kind == "cast":
        return cast_value(args[0], DType(op.attr("dtype")))
    if scalar:
        return _eval_scalar(op, args)
    t: TensorType = op.type  # type: ignore[assignment]
    is_int = t.dtype is DType.I32
    with np.errstate(all="ignore"):
        if kind == "neg":
            return _wrap(-np.asarray(args[0], dtype=np.int64)) if t.dtype is DType.I32 else -args[0]
        if kind == "not":
            return np.logical_not(args[0])
        if kind == "abs":
            return _wrap(np.abs(np.asarray(args[0], dtype=np.int64))) if t.dtype is DType.I32 else np.abs(args[0])
        if kind == "relu":
            return _relu(args[0])
        if kind in _FLOAT_UNARY:
            return _FLOAT_UNARY[kind](args[0])
        if kind in ir.BINARY_OPS:
            return _binary(kind, args[0], args[1], is_int)
        if kind == "where":
            return np.where(args[0], args[1], args[2])
        if kind == "transpose":
            return np.swapaxes(args[0], -1, -2)
        if kind == "matmul":
            return np.matmul(args[0], args[1])
        if kind in ir.REDUCE_OPS:
            return _reduce(kind, args[0], op.attr("axis"), op.attr("keepdims"), t.dtype)
        if kind == "softmax":
            return _softmax(args[0], op.attr("axis"))
        if kind == "log_softmax":
            return _log_softmax(args[0], op.attr("axis"))
        if kind == "layernorm":
            return _layernorm(*args, eps=op.attr("eps"))
        if kind == "rmsnorm":
            return _rmsnorm(*args, eps=op.attr("eps"))
    raise AssertionError(f"reference has no rule for {kind}")


def evaluate(pipeline: ir.Pipeline, value: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, object]):
    """``value`` of ``pipeline`` in the reference semantics, computing only the ops it is computed from (the
    parameters among them taken from ``inputs`` and ``params``)."""
    ops = list(pipeline.ops())
    needed = ir.ancestors({op.out: op for op in ops}, value)
    env: dict[str, object] = {}
    for p in pipeline.params:
        if p.name in needed:
            env[p.name] = to_compute(inputs[p.name], p.type.dtype) if p.is_tensor else params[p.name]  # type: ignore[union-attr]
    for op in ops:  # in program order
        if op.out in needed:
            v = eval_op(op, env)
            env[op.out] = bind_round(v, op.type.dtype) if op.named and isinstance(op.type, TensorType) else v
    return env[value]


def _reduce(kind, x, axis, keepdims, dtype: DType):
    if dtype is DType.I32:
        if kind == "sum":
            return _wrap(np.sum(x, axis=axis, keepdims=keepdims, dtype=np.int64))
        return {"max": np.max, "min": np.min}[kind](x, axis=axis, keepdims=keepdims)
    return {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[kind](x, axis=axis, keepdims=keepdims)


def _eval_scalar(op: ir.Op, args):
    kind = op.op
    out_kind = op.type.kind  # type: ignore[union-attr]
    if kind == "neg":
        return -args[0]
    if kind == "not":
        return not args[0]
    if kind == "abs":
        return abs(args[0])
    if kind == "relu":
        return args[0] if (args[0] != args[0] or args[0] > 0) else type(args[0])(0)
    if kind in _FLOAT_UNARY:
        return float(_FLOAT_UNARY[kind](np.float64(args[0])))
    if kind == "where":
        return args[1] if args[0] else args[2]
    a, b = args
    with np.errstate(all="ignore"):
        if kind in ("div", "pow"):
            return float(_binary(kind, np.float64(a), np.float64(b), False))
        if out_kind is Kind.INT and kind in ("add", "sub", "mul", "maximum", "minimum"):
            return {"add": a + b, "sub": a - b, "mul": a * b, "maximum": max(a, b), "minimum": min(a, b)}[kind]
        value = _binary(kind, np.float64(a) if out_kind is Kind.FLOAT else a, b, False)
    return bool(value) if out_kind is Kind.BOOL else float(value)


@dataclass
class HostHooks:
    """What host statements do; the CLI and the runtimes share these."""

    stream: object = None
    skip: bool = False

    def on_print(self, name: str, dtype: DType, value: np.ndarray) -> None:
        print(summarize(name, dtype, value), file=self.stream or sys.stderr)

    def on_assert_finite(self, name: str, value: np.ndarray, stmt: ir.HostStmt) -> None:
        bad = int(np.size(value) - np.count_nonzero(np.isfinite(value))) if np.asarray(value).dtype.kind == "f" else 0
        if bad:
            raise RunFailure(
                f"{stmt.span}: assert_finite({name}) failed: {bad} of {np.size(value)} elements are NaN or infinite"
            )


def summarize(name: str, dtype: DType, value: np.ndarray) -> str:
    """``x: f32[20, 31] min=... max=... mean=...`` (NaN-aware)."""
    arr = np.asarray(value)
    shape = ", ".join(str(d) for d in arr.shape)
    head = f"{name}: {dtype.value}[{shape}]"
    if arr.size == 0:
        return head + " (empty)"
    work = arr.astype(np.float64)
    nans = int(np.count_nonzero(np.isnan(work)))
    finite_or_inf = work[~np.isnan(work)]
    if finite_or_inf.size == 0:
        return f"{head} min=nan max=nan mean=nan nan={nans}"
    text = (
        f"{head} min={np.min(finite_or_inf):.6g} max={np.max(finite_or_inf):.6g} "
        f"mean={np.mean(finite_or_inf):.6g}"
    )
    return text + (f" nan={nans}" if nans else "")


def execute(
    pipeline: ir.Pipeline,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, object],
    hooks: HostHooks | None = None,
) -> dict[str, np.ndarray]:
    """Run ``pipeline`` in float64; returns every result as an array of its declared dtype.

    ``inputs`` are host arrays of the declared dtypes; ``params`` the scalar parameter values.
    Host statements run where they stand when ``hooks`` is given (``print`` writes to
    standard error, ``assert_finite`` raises :class:`RunFailure`).
    """
    # IEEE semantics are the point (overflow to infinity, 0/0 is NaN): NumPy's warnings about
    # them would only be noise on the user's standard error.
    with np.errstate(all="ignore"):
        return _execute(pipeline, inputs, params, hooks)


def _execute(pipeline, inputs, params, hooks) -> dict[str, np.ndarray]:
    env: dict[str, object] = {}
    for p in pipeline.params:
        if p.is_tensor:
            env[p.name] = to_compute(inputs[p.name], p.type.dtype)  # type: ignore[union-attr]
        else:
            env[p.name] = params[p.name]
    types = pipeline.value_types()
    for stmt, _graph, _kernel in ir.walk(pipeline.body):
        if isinstance(stmt, ir.Op):
            value = eval_op(stmt, env)
            if stmt.named and isinstance(stmt.type, TensorType):
                value = bind_round(value, stmt.type.dtype)
            env[stmt.out] = value
        elif isinstance(stmt, ir.HostStmt) and hooks is not None and not hooks.skip:
            if stmt.kind == "print":
                t = types[stmt.arg]
                dtype = t.dtype if isinstance(t, TensorType) else DType.F64
                hooks.on_print(stmt.arg, dtype, np.asarray(env[stmt.arg]))
            elif stmt.kind == "assert_finite":
                hooks.on_assert_finite(stmt.arg, np.asarray(env[stmt.arg]), stmt)
    return {r.name: round_to(np.asarray(env[r.name]), r.type.dtype) for r in pipeline.results}
