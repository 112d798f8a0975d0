"""Bind a loaded spec to a checked pipeline: sizes for symbols, values for scalars, input sources.

The order of binding (LANGUAGE.md section 7): symbols take their size from ``shapes`` first,
then from the headers of the ``.npy`` input files, in parameter order. Only a file's header is
read here (never its data, never a pickle). What can go wrong, each reported at the spec line
that caused it and all reported together:

- a name under ``shapes``, ``params`` or ``inputs`` that the pipeline does not have (E501);
- a file whose rank, shape or dtype differs from its declaration, or a symbol bound two ways
  with different sizes (E506, at the input's key);
- a symbol with no size (E502), a scalar with no value (E507), a value of the wrong kind (E508);
- a symbol whose size contradicts a literal dimension it must match (E204, in the .cuvil file);
- buffers no machine could hold (E509).

Generated inputs without a ``seed`` use the parameter's position: its 0-based index among
*all* the pipeline's parameters, tensors and scalars, in declaration order. So in
``f(x: f32[N], alpha: f32, y: f32[N])`` the default seeds are 0 for ``x`` and 2 for ``y``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union

import numpy as np

from cuvil_dsl.diagnostics import Diagnostic, Span, UserError, did_you_mean, error, raise_if_errors
from cuvil_dsl.ir.nodes import Module, Param, Pipeline
from cuvil_dsl.spec.loader import LoadedSpec
from cuvil_dsl.spec.models import FileInput, FilledInput, NormalInput, UniformInput
from cuvil_dsl.types import DType, Kind, Sym, TensorType, concrete_shape, symbols_of

# One buffer this large is a typo in a size, not a workload.
MAX_BUFFER_BYTES = 2**40
I32_RANGE = (-(2**31), 2**31 - 1)

# The .npy dtypes accepted for each declared dtype. bf16 has no NumPy dtype of its own on disk:
# it comes as float32 (rounded when loaded) or as uint16 bit patterns.
FILE_DTYPES: dict[DType, tuple[np.dtype, ...]] = {
    DType.F16: (np.dtype(np.float16),),
    DType.BF16: (np.dtype(np.float32), np.dtype(np.uint16)),
    DType.F32: (np.dtype(np.float32),),
    DType.F64: (np.dtype(np.float64),),
    DType.I32: (np.dtype(np.int32),),
    DType.BOOL: (np.dtype(np.bool_),),
}


@dataclass(frozen=True)
class GeneratedSource:
    """Values drawn by :func:`cuvil_dsl.spec.inputs.make_inputs` (its docstring has the rules)."""

    init: str  # normal | uniform | zeros | ones | arange
    seed: int
    span: Span  # the input's key in the spec, or the file start when it is not listed
    mean: float = 0.0
    std: float = 1.0
    low: float = -1.0
    high: float = 1.0


@dataclass(frozen=True)
class FileSource:
    """A ``.npy`` file whose header matched the declaration when the spec was bound."""

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype  # as stored (native byte order): for bf16, float32 or uint16
    span: Span


InputSource = Union[GeneratedSource, FileSource]


@dataclass(frozen=True)
class Binding:
    """Everything a run needs from the spec, checked against the pipeline.

    ``shapes`` holds the concrete shape of every tensor parameter and result.
    """

    sizes: dict[str, int]
    params: dict[str, float | int | bool]
    inputs: dict[str, InputSource]
    shapes: dict[str, tuple[int, ...]]


def _unknown(kind: str, name: str, known: Iterable[str], span: Span, hint: str | None = None) -> Diagnostic:
    return error("E501", f"unknown {kind} `{name}`", span, hint=hint or did_you_mean(name, known))


def check_kernel_names(loaded: LoadedSpec, known_names: Iterable[str]) -> list[Diagnostic]:
    """E501 for each name under ``kernels`` that names no kernel (block or generated) of the plan."""
    known = list(known_names)
    return [
        _unknown("kernel", name, known, loaded.span_of("kernels", name))
        for name in loaded.spec.kernels
        if name not in known
    ]


def select_pipeline(loaded: LoadedSpec, module: Module) -> Pipeline:
    """The pipeline the spec's ``entry`` names, or the only one in the file (else E508)."""
    chosen = module.pipeline(loaded.spec.entry)
    if chosen is not None:
        return chosen
    names = [p.name for p in module.pipelines]
    listed = ", ".join(names) or "none"
    entry = loaded.spec.entry
    if entry is None:
        message = f"`{module.file}` holds {len(names)} pipelines ({listed})"
        problem = error("E508", message, loaded.file_start(), hint="name the one to run with `entry:`")
    else:
        hint = did_you_mean(entry, names) or f"the file holds: {listed}"
        problem = error("E508", f"no pipeline `{entry}` in `{module.file}`", loaded.span_of("entry", key=False), hint)
    raise UserError([problem])


def _check_names(loaded: LoadedSpec, pipeline: Pipeline) -> list[Diagnostic]:
    spec = loaded.spec
    symbols = pipeline.symbols()
    tensors = [p.name for p in pipeline.tensor_params]
    scalars = [p.name for p in pipeline.scalar_params]
    problems = []
    for name in spec.shapes:
        if name not in symbols:
            problems.append(_unknown("symbol", name, symbols, loaded.span_of("shapes", name)))
    for name in spec.params:
        if name not in scalars:
            hint = f"`{name}` is a tensor: give it under inputs" if name in tensors else None
            problems.append(_unknown("scalar parameter", name, scalars, loaded.span_of("params", name), hint))
    results = [r.name for r in pipeline.results]
    for name in spec.inputs:
        if name not in tensors:
            hint = f"`{name}` is a scalar: give it under params" if name in scalars else None
            hint = f"`{name}` is a result, not an input" if name in results else hint
            problems.append(_unknown("tensor input", name, tensors, loaded.span_of("inputs", name), hint))
    return problems


def _read_npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from a ``.npy`` header; ValueError if it is not one we read."""
    with open(path, "rb") as stream:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported")
    return tuple(int(d) for d in shape), dtype


def expected_file_dtypes(declared: DType) -> str:
    """How a message names the dtypes a file of ``declared`` data may hold."""
    if declared is DType.BF16:
        return "float32 or uint16 (bf16 bit patterns)"
    return FILE_DTYPES[declared][0].name


def _bind_file(
    param: Param, path: Path, sizes: dict[str, int], origins: dict[str, str], span: Span
) -> tuple[FileSource | None, list[Diagnostic]]:
    """Check a file's header against ``param``'s declaration and bind the symbols it fixes."""
    assert isinstance(param.type, TensorType)
    declared = param.type
    where = f"`{param.name}` ({path.name})"
    try:
        shape, dtype = _read_npy_header(path)
    except Exception as exc:  # noqa: BLE001 - NumPy's header parser raises many kinds on hostile bytes
        # (ValueError, EOFError, SyntaxError, tokenize.TokenError, TypeError, OverflowError, ...):
        # whatever it is, the file is not one we read.
        return None, [error("E506", f"{where} is not a readable .npy file: {type(exc).__name__}: {exc}", span)]
    if dtype.hasobject:
        return None, [error("E506", f"{where} holds Python objects; object arrays are refused", span)]
    native = dtype.newbyteorder("=")
    if native not in FILE_DTYPES[declared.dtype]:
        hint = "save bf16 data as float32, or as uint16 with arr.view(np.uint16)" if declared.dtype is DType.BF16 else None
        message = f"{where} holds {dtype.name} data; {declared.dtype.value} input needs {expected_file_dtypes(declared.dtype)}"
        return None, [error("E506", message, span, hint=hint)]
    if len(shape) != declared.rank:
        message = f"{where} has shape {shape}, rank {len(shape)}; declared {declared} has rank {declared.rank}"
        return None, [error("E506", message, span)]
    if any(size < 1 for size in shape):
        # a size the spec's `shapes` could not give either (sizes are positive, LANGUAGE.md section 3)
        return None, [error("E506", f"{where} has shape {shape}: every dimension must be at least 1", span)]
    problems = []
    for axis, (dim, size) in enumerate(zip(declared.shape, shape)):
        if isinstance(dim, Sym):
            bound = sizes.get(dim.name)
            if bound is None:
                sizes[dim.name] = size
                origins[dim.name] = f"axis {axis} of {where}"
            elif bound != size:
                message = (
                    f"symbol `{dim.name}` is bound two ways: {bound} from {origins[dim.name]}, "
                    f"{size} from axis {axis} of {where}"
                )
                problems.append(error("E506", message, span))
        elif dim != size:
            message = f"{where} has shape {shape}; declared {declared} needs {dim} on axis {axis}"
            problems.append(error("E506", message, span))
    if problems:
        return None, problems
    return FileSource(path, shape, native, span), []


def _sources(
    loaded: LoadedSpec, pipeline: Pipeline, sizes: dict[str, int]
) -> tuple[dict[str, InputSource], set[str], list[Diagnostic]]:
    """Each tensor parameter's source; files bind the symbols they fix into ``sizes``.

    Also returns the symbols of files that could not be used: they have no size because of a
    problem already reported, so they are not reported again as E502.
    """
    origins = {name: "shapes" for name in sizes}
    sources: dict[str, InputSource] = {}
    unresolved: set[str] = set()
    problems: list[Diagnostic] = []
    for position, param in enumerate(pipeline.params):
        if not param.is_tensor:
            continue
        spec = loaded.spec.inputs.get(param.name)
        span = loaded.span_of("inputs", param.name) if spec is not None else loaded.file_start()
        if isinstance(spec, FileInput):
            # Data problems point at the `file` key: the file is what disagrees with the declaration.
            file_span = loaded.span_of("inputs", param.name, "file")
            source, found = _bind_file(param, loaded.input_paths[param.name], sizes, origins, file_span)
            problems += found
            if source is not None:
                sources[param.name] = source
            else:
                unresolved.update(symbols_of(param.type.shape))
        elif isinstance(spec, NormalInput):
            seed = position if spec.seed is None else spec.seed
            sources[param.name] = GeneratedSource("normal", seed, span, mean=spec.mean, std=spec.std)
        elif isinstance(spec, UniformInput):
            seed = position if spec.seed is None else spec.seed
            sources[param.name] = GeneratedSource("uniform", seed, span, low=spec.low, high=spec.high)
        elif isinstance(spec, FilledInput):
            sources[param.name] = GeneratedSource(spec.init, position, span)
        else:
            sources[param.name] = GeneratedSource("normal", position, span)
    return sources, unresolved, problems


def _scalar_value(loaded: LoadedSpec, param: Param) -> tuple[float | int | bool | None, list[Diagnostic]]:
    """The value of a scalar parameter, from ``params`` or its default, stored by its kind."""
    given = loaded.spec.params.get(param.name)
    value = param.default if given is None else given
    if value is None:
        message = f"scalar parameter `{param.name}` has no value"
        hint = f"add it under params: {{{param.name}: ...}}"
        return None, [error("E507", message, loaded.span_of("params"), hint=hint)]
    kind = param.type.kind
    span = loaded.span_of("params", param.name, key=False)
    wrong = {
        Kind.BOOL: not isinstance(value, bool),
        Kind.INT: isinstance(value, bool) or not isinstance(value, int),
        Kind.FLOAT: isinstance(value, bool),
    }[kind]
    if wrong:
        expected = {Kind.BOOL: "true or false", Kind.INT: "an integer", Kind.FLOAT: "a number"}[kind]
        message = f"`{param.name}` is declared {param.declared.value}: expected {expected}, got {_yaml_text(value)}"
        return None, [error("E508", message, span)]
    if kind is Kind.INT and not I32_RANGE[0] <= value <= I32_RANGE[1]:
        return None, [error("E508", f"`{param.name}` is declared i32: {value} does not fit in 32 bits", span)]
    if kind is Kind.FLOAT:
        try:
            return float(value), []
        except OverflowError:  # an integer beyond float64 (YAML integers are unbounded)
            shown = _yaml_text(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            return None, [error("E508", f"`{param.name}` is declared {param.declared.value}: {shown} is beyond "
                                        "the range of a float", span)]
    return value, []


def _yaml_text(value: float | int | bool) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def host_memory_bytes() -> int | None:
    """Physical memory of this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _human(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def _check_sizes(
    loaded: LoadedSpec, pipeline: Pipeline, shapes: dict[str, tuple[int, ...]], limit: int | None
) -> list[Diagnostic]:
    """E509 for a buffer over :data:`MAX_BUFFER_BYTES`, or all buffers together over ``limit``."""
    span = loaded.span_of("shapes")
    declared = {p.name: p.type for p in pipeline.tensor_params} | {r.name: r.type for r in pipeline.results}
    problems = []
    total = 0
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * declared[name].dtype.itemsize
        total += nbytes
        if nbytes > MAX_BUFFER_BYTES:
            message = f"`{name}`: {declared[name]} = {list(shape)} needs {_human(nbytes)}, more than {_human(MAX_BUFFER_BYTES)}"
            problems.append(error("E509", message, span))
    if not problems and limit is not None and total > limit:
        listed = ", ".join(f"{n}{list(s)}" for n, s in shapes.items())
        message = f"inputs and results need {_human(total)} together ({listed}); the limit is {_human(limit)}"
        problems.append(error("E509", message, span, hint="use smaller shapes"))
    return problems


def reference_bytes(pipeline: Pipeline, sizes: dict[str, int]) -> int:
    """Host memory the float64 reference needs for ``pipeline`` at ``sizes``: every tensor it
    holds (inputs, each op's value, results) in its working type (float64 for floating dtypes,
    int32, bool), plus the inputs as generated (one float64 draw of each shape).

    The reference keeps every value of a run, so this is its peak, give or take NumPy's
    temporaries inside one op; it is what decides whether the host can check a run at all.
    """
    def working(t: TensorType) -> int:
        n = math.prod(concrete_shape(t.shape, sizes))
        return n * (8 if t.dtype.is_float else t.dtype.itemsize)

    total = 0
    for param in pipeline.tensor_params:
        assert isinstance(param.type, TensorType)
        n = math.prod(concrete_shape(param.type.shape, sizes))
        total += working(param.type) + n * (8 + param.type.dtype.itemsize)  # draw, cast, working copy
    for op in pipeline.ops():
        if isinstance(op.type, TensorType):
            total += working(op.type)
    return total


def check_reference_memory(loaded: LoadedSpec, pipeline: Pipeline, binding: Binding, why: str,
                           limit: int | None = None) -> list[Diagnostic]:
    """E509 when the float64 reference (run because of ``why``) would not fit in host memory.

    Checked before any input is generated, so such a run is refused instead of being killed
    by the operating system halfway through.
    """
    limit = host_memory_bytes() if limit is None else limit
    if limit is None or not binding.shapes:
        return []
    need = reference_bytes(pipeline, binding.sizes)
    if need <= limit:
        return []
    listed = ", ".join(f"{name}={size}" for name, size in binding.sizes.items())
    message = (f"the float64 reference ({why}) needs about {_human(need)} of host memory for this pipeline's "
               f"values at {listed or 'these sizes'}; this machine has {_human(limit)}")
    hint = "use smaller shapes" + (", or set check: {reference: none}" if "check" in why else "")
    return [error("E509", message, loaded.span_of("shapes"), hint=hint)]


def _check_constraints(pipeline: Pipeline, sizes: dict[str, int]) -> list[Diagnostic]:
    problems = []
    for constraint in pipeline.constraints:
        bound = sizes.get(constraint.symbol)
        if bound is not None and bound != constraint.size:
            message = (
                f"symbol `{constraint.symbol}` is bound to {bound} but must be {constraint.size} here "
                f"({constraint.why})"
            )
            problems.append(error("E204", message, constraint.span))
    return problems


def bind(loaded: LoadedSpec, pipeline: Pipeline, memory_limit: int | None = None) -> Binding:
    """Check ``loaded`` against ``pipeline`` and resolve sizes, scalar values and input sources.

    ``memory_limit`` caps the bytes of all parameter and result buffers together (default: this
    machine's physical memory). Raises :class:`UserError` with every problem found.
    """
    problems = _check_names(loaded, pipeline)
    symbols = pipeline.symbols()
    sizes = {name: size for name, size in loaded.spec.shapes.items() if name in symbols}
    sources, unresolved, found = _sources(loaded, pipeline, sizes)
    problems += found
    for symbol in symbols:
        if symbol not in sizes and symbol not in unresolved:
            problems.append(
                error(
                    "E502",
                    f"symbol `{symbol}` has no size",
                    loaded.span_of("shapes"),
                    hint=f"add it under shapes: {{{symbol}: ...}}",
                )
            )
    problems += _check_constraints(pipeline, sizes)
    params: dict[str, float | int | bool] = {}
    for param in pipeline.scalar_params:
        value, found = _scalar_value(loaded, param)
        problems += found
        if value is not None:
            params[param.name] = value
    shapes: dict[str, tuple[int, ...]] = {}
    if all(symbol in sizes for symbol in symbols):
        typed = [(p.name, p.type) for p in pipeline.tensor_params] + [(r.name, r.type) for r in pipeline.results]
        shapes = {name: concrete_shape(t.shape, sizes) for name, t in typed}
        limit = host_memory_bytes() if memory_limit is None else memory_limit
        problems += _check_sizes(loaded, pipeline, shapes, limit)
    raise_if_errors(problems)
    return Binding(sizes, params, sources, shapes)
