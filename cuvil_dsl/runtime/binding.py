"""What one execution binds: symbol sizes from arrays, scalar parameter values, uniform values.

Shared by every executor and the Python API, so a wrong array or scalar is reported the same way
whichever backend runs it: E506 for data that does not match its declaration (at the parameter's
declaration), E502 for a size nothing gives, E507 for a missing scalar, E508 for a scalar of the
wrong kind, E204 for a size that contradicts a literal dimension.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from cuvil_dsl.diagnostics import Diagnostic, error, raise_if_errors
from cuvil_dsl.ir.nodes import Param, Pipeline
from cuvil_dsl.passes.plan import FusionPlan
from cuvil_dsl.reference.executor import bind_round, eval_op
from cuvil_dsl.types import DType, Kind, Sym, TensorType, concrete_shape

I32_RANGE = (-(2**31), 2**31 - 1)


def dtype_matches(declared: DType, dtype: np.dtype) -> bool:
    """Whether array data of ``dtype`` can stand for ``declared`` as is (bf16 also as uint16 bits)."""
    return dtype == declared.numpy or (declared is DType.BF16 and dtype == np.uint16)


def infer_sizes(pipeline: Pipeline, fixed: Mapping[str, int], shapes: Mapping[str, tuple[int, ...]],
                dtypes: Mapping[str, np.dtype]) -> dict[str, int]:
    """Sizes of every symbol of ``pipeline`` from the arrays' shapes, after the ``fixed`` ones.

    ``shapes``/``dtypes`` hold each tensor parameter's array; raises :class:`UserError` with every
    problem found.
    """
    sizes = dict(fixed)
    origins = {name: "the compiled shapes" for name in sizes}
    problems: list[Diagnostic] = []
    for param in pipeline.tensor_params:
        problems += _bind_array(param, shapes[param.name], dtypes[param.name], sizes, origins)
    problems += constraint_problems(pipeline, sizes)
    for symbol in pipeline.symbols():
        if symbol not in sizes and not problems:
            problems.append(error("E502", f"symbol `{symbol}` has no size: no input array gives it", pipeline.span,
                                  hint=f"pass shapes={{'{symbol}': ...}} to compile()"))
    raise_if_errors(problems)
    return sizes


def _bind_array(param: Param, shape: tuple[int, ...], dtype: np.dtype, sizes: dict[str, int],
                origins: dict[str, str]) -> list[Diagnostic]:
    declared = param.type
    assert isinstance(declared, TensorType)
    if not dtype_matches(declared.dtype, dtype):
        return [error("E506", f"`{param.name}` is declared {declared}; the array holds {dtype}", param.span,
                      hint=_dtype_hint(declared.dtype))]
    if len(shape) != declared.rank:
        return [error("E506", f"`{param.name}` is declared {declared}; the array has shape {list(shape)}",
                      param.span)]
    problems = []
    for axis, (dim, size) in enumerate(zip(declared.shape, shape)):
        if isinstance(dim, Sym):
            bound = sizes.setdefault(dim.name, size)
            origins.setdefault(dim.name, f"axis {axis} of `{param.name}`")
            if bound != size:
                problems.append(error("E506", f"symbol `{dim.name}` is {bound} from {origins[dim.name]} but {size} "
                                              f"on axis {axis} of `{param.name}`", param.span))
        elif dim != size:
            problems.append(error("E506", f"`{param.name}` is declared {declared}; the array has shape "
                                          f"{list(shape)} (axis {axis} must be {dim})", param.span))
    return problems


def _dtype_hint(dtype: DType) -> str:
    if dtype is DType.BF16:
        return "pass ml_dtypes.bfloat16 data (or its uint16 bit patterns)"
    return f"convert it with .astype({dtype.numpy.name})"


def constraint_problems(pipeline: Pipeline, sizes: Mapping[str, int]) -> list[Diagnostic]:
    """E204 for each symbol bound to a size that contradicts a literal dimension it must match."""
    return [
        error("E204", f"symbol `{c.symbol}` is bound to {sizes[c.symbol]} but must be {c.size} here ({c.why})", c.span)
        for c in pipeline.constraints
        if c.symbol in sizes and sizes[c.symbol] != c.size
    ]


def check_host_inputs(pipeline: Pipeline, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray]) -> None:
    """E506 unless ``inputs`` holds one array of the declared dtype and concrete shape per tensor parameter."""
    problems = []
    for param in pipeline.tensor_params:
        declared = param.type
        assert isinstance(declared, TensorType)
        array = inputs.get(param.name)
        if array is None:
            problems.append(error("E506", f"no data for input `{param.name}`", param.span))
            continue
        array = np.asarray(array)
        shape = concrete_shape(declared.shape, dict(sizes))
        if not dtype_matches(declared.dtype, array.dtype) or array.shape != shape:
            problems.append(error("E506", f"`{param.name}` takes {declared.dtype.value}{list(shape)}; got "
                                          f"{array.dtype}{list(array.shape)}", param.span))
    raise_if_errors(problems)


def resolve_params(pipeline: Pipeline, given: Mapping[str, object]) -> dict[str, float | int | bool]:
    """A value for every scalar parameter: the given one, else its default, stored by its kind."""
    values: dict[str, float | int | bool] = {}
    problems = []
    for param in pipeline.scalar_params:
        value = given.get(param.name, param.default)
        if value is None:
            problems.append(error("E507", f"scalar parameter `{param.name}` has no value", param.span,
                                  hint=f"pass {param.name}=..."))
            continue
        converted = _scalar(param, value)
        if converted is None:
            problems.append(error("E508", f"`{param.name}` is declared {param.declared.value}: {value!r} is not "
                                          f"{_KIND_WORDS[param.type.kind]}", param.span))
        else:
            values[param.name] = converted
    raise_if_errors(problems)
    return values


_KIND_WORDS = {Kind.FLOAT: "a number", Kind.INT: "an integer in i32 range", Kind.BOOL: "true or false"}


def _scalar(param: Param, value: object) -> float | int | bool | None:
    if isinstance(value, np.generic):
        value = value.item()
    kind = param.type.kind
    if kind is Kind.BOOL:
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if kind is Kind.INT:
        return value if isinstance(value, int) and I32_RANGE[0] <= value <= I32_RANGE[1] else None
    return float(value) if isinstance(value, (int, float)) else None


def evaluate_uniforms(plan: FusionPlan, params: Mapping[str, object]) -> dict[str, object]:
    """The plan's host-evaluated scalar values (and the parameters), in the reference's semantics."""
    env: dict[str, object] = dict(params)
    for op in plan.host_ops:
        value = eval_op(op, env)
        if op.named and isinstance(op.type, TensorType):
            value = bind_round(value, op.type.dtype)
        env[op.out] = value
    return env
