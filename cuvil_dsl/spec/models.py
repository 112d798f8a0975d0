"""The spec file as pydantic models: exactly the keys of LANGUAGE.md section 7, with its defaults.

Every model forbids unknown keys (so a misspelled key is an error, E501, never silently ignored)
and is frozen (later stages read the spec, they never patch it). Validation is strict: YAML
already gives numbers, booleans and strings their types, so ``iterations: "ten"`` or
``block: 256.0`` is an error rather than a coercion. An integer is accepted where a number is.

Launch settings are checked here, not in codegen, so a bad ``block`` is reported at its YAML
line before anything is compiled. Custom checks raise :class:`PydanticCustomError` with a
message written for users; the loader turns every error into a :class:`Diagnostic`.

Two interpretations of section 7, stated here because the text shows example values:

- ``budget``: only ``backend`` has a default (``cuda``); every limit is optional and an absent
  limit is not judged.
- ``check``: ``rtol``/``atol`` default by the result's dtype (:meth:`Check.tolerances`).
"""

from __future__ import annotations

import math
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from cuvil_dsl.diagnostics import did_you_mean
from cuvil_dsl.types import DType

# Architectures NVRTC 13.0 (the pinned compiler) builds for; ``a`` variants exist from sm_90.
KNOWN_ARCHES: tuple[int, ...] = (75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
_ARCH_RE = re.compile(r"sm_(\d+)(a?)")

# Tile sizes are powers of two up to this bound: larger tiles never fit in shared memory.
MAX_TILE = 256
# More resident blocks per SM than any supported architecture allows.
MAX_MIN_BLOCKS = 32
INIT_KINDS: tuple[str, ...] = ("normal", "uniform", "zeros", "ones", "arange")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _custom(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise _custom("finite", "must be a finite number")
    return value


Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _param_value(value: Any) -> bool | int | float:
    # bool before int: YAML's ``true`` is a Python bool, which is also an int.
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return _finite(value)
    raise _custom("param_value", "expected a finite number, true or false")


ParamValue = Annotated[Union[bool, int, float], PlainValidator(_param_value)]


def _arch(value: Any) -> str:
    if value == "auto":
        return value
    match = _ARCH_RE.fullmatch(value) if isinstance(value, str) else None
    known = ", ".join(f"sm_{n}" for n in KNOWN_ARCHES)
    if match is None:
        raise _custom("arch", f"unknown arch; expected auto or one of {known} (sm_90a style from sm_90)")
    number, accel = int(match.group(1)), match.group(2)
    if number < 75:
        raise _custom("arch", "unsupported arch: the compiler builds for sm_75 and newer")
    if number not in KNOWN_ARCHES or (accel and number < 90):
        raise _custom("arch", f"unknown arch; expected auto or one of {known} (sm_90a style from sm_90)")
    return value


def _devices(value: Any) -> tuple[int, ...] | Literal["all"]:
    if value == "all":
        return "all"
    if isinstance(value, (list, tuple)) and value and all(type(v) is int and v >= 0 for v in value):
        if len(set(value)) != len(value):
            raise _custom("devices", "GPU ordinals must not repeat")
        return tuple(value)
    raise _custom("devices", "expected a non-empty list of GPU ordinals (0, 1, ...) or all")


def _options(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _custom("options", "expected a list of compiler options (strings)")


class Target(_Model):
    """Where and how the pipeline is built and run."""

    backend: Literal["auto", "cuda", "cpu", "reference"] = "auto"
    arch: Annotated[str, PlainValidator(_arch)] = "auto"
    compiler: Literal["nvrtc", "nvcc"] = "nvrtc"
    fallback: Literal["nvcc", "none"] = "nvcc"
    fast_math: bool = False
    tf32: bool = False
    options: Annotated[tuple[str, ...], PlainValidator(_options)] = ()
    devices: Annotated[Union[tuple[int, ...], Literal["all"]], PlainValidator(_devices)] = (0,)


def _threads(value: int) -> int:
    if value % 32 or not 32 <= value <= 1024:
        raise _custom("launch", "threads per block must be a multiple of 32 from 32 to 1024")
    return value


def _power_of_two_tile(value: int) -> int:
    if value < 1 or value > MAX_TILE or value & (value - 1):
        raise _custom("launch", f"a tile size must be a power of two from 1 to {MAX_TILE}")
    return value


class LaunchBounds(_Model):
    """``__launch_bounds__(max_threads, min_blocks)``: what the compiler may assume per launch."""

    max_threads: int
    min_blocks: Annotated[int, Field(ge=1, le=MAX_MIN_BLOCKS)] | None = None

    @field_validator("max_threads")
    @classmethod
    def _check_threads(cls, value: int) -> int:
        return _threads(value)


class Tile(_Model):
    """Tile of a matmul kernel; an absent size is left to the planner."""

    m: int | None = None
    n: int | None = None
    k: int | None = None

    @field_validator("m", "n", "k")
    @classmethod
    def _check_tile(cls, value: int | None) -> int | None:
        return None if value is None else _power_of_two_tile(value)


class KernelSettings(_Model):
    """Overrides for one kernel, by kernel-block name or generated name; nothing is required."""

    launch_bounds: LaunchBounds | None = None
    block: int | None = None
    tile: Tile | None = None
    max_registers: Annotated[int, Field(ge=16, le=255)] | None = None

    @field_validator("block")
    @classmethod
    def _check_block(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return None
        _threads(value)
        bounds = info.data.get("launch_bounds")
        if bounds is not None and value > bounds.max_threads:
            raise _custom("launch", f"block exceeds launch_bounds.max_threads ({bounds.max_threads})")
        return value


class NormalInput(_Model):
    """``numpy.random.default_rng(seed).normal(mean, std)``; seed defaults to the parameter's position."""

    init: Literal["normal"]
    mean: Finite = 0.0
    std: NonNegative = 1.0
    seed: Annotated[int, Field(ge=0)] | None = None


class UniformInput(_Model):
    """``numpy.random.default_rng(seed).uniform(low, high)``; seed defaults to the parameter's position."""

    init: Literal["uniform"]
    low: Finite = -1.0
    high: Finite = 1.0
    seed: Annotated[int, Field(ge=0)] | None = None

    @field_validator("high")
    @classmethod
    def _check_range(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("low")
        if low is not None and value < low:
            raise _custom("range", f"high must not be below low ({low})")
        if low is not None and not math.isfinite(value - low):
            # NumPy draws low + (high - low) * u and refuses a range that overflows float64
            raise _custom("range", f"high - low must be a finite number (low is {low})")
        return value


class FilledInput(_Model):
    """Deterministic fills; they take no other keys (a seed would mean nothing)."""

    init: Literal["zeros", "ones", "arange"]


class FileInput(_Model):
    """A NumPy ``.npy`` file, relative to the spec's folder, loaded without pickles."""

    file: Annotated[str, Field(min_length=1)]


def input_tag(value: Any) -> str | None:
    """Which input model a YAML value is meant for; None when it cannot be told (then an error)."""
    if not isinstance(value, dict) or ("file" in value) == ("init" in value):
        return None
    if "file" in value:
        return "file"
    init = value["init"]
    if init in ("normal", "uniform"):
        return init
    return "filled" if init in ("zeros", "ones", "arange") else None


def input_source_problem(value: Any) -> tuple[str | None, str, str | None]:
    """Why ``input_tag`` gave up on ``value``: the key to point at (None: the input itself), a message and a hint
    (or None). The key is ``init`` for an unknown init, else a key no input takes (an unknown key, E501)."""
    kinds = ", ".join(INIT_KINDS)
    if not isinstance(value, dict):
        return None, "expected a mapping such as {init: normal, seed: 1} or {file: x.npy}", None
    if "file" in value and "init" in value:
        return None, "give either `init` or `file`, not both", None
    if "init" in value:
        return "init", f"unknown init; expected one of {kinds}", None
    # neither: a key no input model knows is most likely the misspelt one ({random: normal}, {fil: x.npy})
    known = sorted({name for model in (NormalInput, UniformInput, FilledInput, FileInput) for name in model.model_fields})
    for key in value:
        if str(key) not in known:
            if value[key] in INIT_KINDS:
                hint = f"write `init: {value[key]}`"
            else:
                hint = did_you_mean(str(key), ("init", "file")) or f"an input's keys: {', '.join(known)}"
            return str(key), f"an input needs `init` ({kinds}) or `file`", hint
    return None, f"needs `init` ({kinds}) or `file`", None


InputSpec = Annotated[
    Union[
        Annotated[NormalInput, Tag("normal")],
        Annotated[UniformInput, Tag("uniform")],
        Annotated[FilledInput, Tag("filled")],
        Annotated[FileInput, Tag("file")],
    ],
    Discriminator(input_tag, custom_error_type="input_source", custom_error_message="invalid input source"),
]



class Check(_Model):
    """How results are compared with the float64 reference."""

    reference: Literal["numpy", "none"] = "numpy"
    rtol: NonNegative | None = None
    atol: NonNegative | None = None

    def tolerances(self, dtype: DType, tf32: bool = False) -> tuple[float, float]:
        """``(rtol, atol)`` for a result of ``dtype``; a spec value replaces only the one it names."""
        from cuvil_dsl.check import tolerances

        return tolerances(dtype, self.rtol, self.atol, tf32)


# More executions than any timing needs; beyond it a count is a typo that would run for days.
MAX_EXECUTIONS = 1_000_000


class Run(_Model):
    """How often ``run`` executes the pipeline before and while timing."""

    warmup: Annotated[int, Field(ge=0, le=MAX_EXECUTIONS)] = 10
    iterations: Annotated[int, Field(ge=1, le=MAX_EXECUTIONS)] = 100


class Budget(_Model):
    """Time and resource limits, judged on ``backend`` only; an absent limit is not judged."""

    backend: Literal["cuda", "cpu", "reference"] = "cuda"
    p50_us: Positive | None = None
    p99_us: Positive | None = None
    max_spill_bytes: Annotated[int, Field(ge=0)] | None = None
    max_registers: Annotated[int, Field(ge=1, le=255)] | None = None
    regress_pct: NonNegative | None = None

    @field_validator("p99_us")
    @classmethod
    def _check_order(cls, value: float | None, info: ValidationInfo) -> float | None:
        p50 = info.data.get("p50_us")
        if value is not None and p50 is not None and value < p50:
            raise _custom("range", f"p99_us must not be below p50_us ({p50})")
        return value


class Spec(_Model):
    """A whole spec file (LANGUAGE.md section 7)."""

    pipeline: Annotated[str, Field(min_length=1)]
    entry: str | None = None
    shapes: dict[str, Annotated[int, Field(gt=0)]] = {}
    params: dict[str, ParamValue] = {}
    target: Target = Target()
    kernels: dict[str, KernelSettings] = {}
    inputs: dict[str, InputSpec] = {}
    check: Check = Check()
    run: Run = Run()
    budget: Budget = Budget()


def model_at(path: tuple, data: Any) -> type[BaseModel] | None:
    """The model that validates the mapping at ``path`` in the raw ``data``, or None.

    Walks the field annotations, so the loader can list the keys allowed where an unknown key
    stands without a second table of the spec's structure.
    """
    annotation: Any = Spec
    node = data
    for key in path:
        model = _pick_model(annotation, node)
        if model is not None:
            field = model.model_fields.get(key) if isinstance(key, str) else None
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
        node = node.get(key) if isinstance(node, dict) else None
    return _pick_model(annotation, node)


def _pick_model(annotation: Any, node: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is Annotated:
        inner, *metadata = get_args(annotation)
        choose = next((m for m in metadata if isinstance(m, Discriminator)), None)
        if choose is None:
            return _pick_model(inner, node)
        tag = choose.discriminator(node)
        for member in get_args(inner):
            member_type, *member_metadata = get_args(member)
            if any(isinstance(m, Tag) and m.tag == tag for m in member_metadata):
                return member_type
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        return next((m for m in (_pick_model(a, node) for a in get_args(annotation)) if m is not None), None)
    return None
