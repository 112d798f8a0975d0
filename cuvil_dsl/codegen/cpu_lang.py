"""Python/numba spellings: what differs from :class:`~cuvil_dsl.codegen.base.Language`.

Compute types are numba's (``float32`` for f16/bf16/f32, ``float64``, ``int32``, ``boolean``).
Every literal is a typed NumPy scalar (``np.float32(1.5)``), because numba widens
``float32 * 1.5`` to float64. numba widens i32 arithmetic to int64, so i32 results are
wrapped back with ``np.int32(...)``, which truncates modulo 2^32 as the language asks.
Helpers the spellings call live in :mod:`~cuvil_dsl.codegen.cpu_prelude` (``cvl.``).
"""

from __future__ import annotations

import math

from cuvil_dsl.codegen.base import Language, PointWalk
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.types import DType

# numba array element type of each dtype's storage: half types are uint16 bit patterns
STORAGE = {DType.F16: "uint16", DType.BF16: "uint16", DType.F32: "float32", DType.F64: "float64",
           DType.I32: "int32", DType.BOOL: "boolean"}

_NUMPY_FUNCS = {"exp2": "np.exp2", "log": "np.log", "log2": "np.log2", "sqrt": "np.sqrt", "sin": "np.sin",
                "cos": "np.cos", "tanh": "np.tanh", "erf": "math.erf", "abs": "abs",
                "maximum": "cvl.fmaximum", "minimum": "cvl.fminimum"}
_TYPED_HELPERS = ("relu", "rsqrt", "sigmoid", "silu", "gelu", "gelu_tanh")


class NumbaLanguage(Language):
    compute_types = {DType.F16: "float32", DType.BF16: "float32", DType.F32: "float32", DType.F64: "float64",
                     DType.I32: "int32", DType.BOOL: "boolean"}
    templates = {
        **Language.templates,
        "not": "(not {x})", "and": "({a} & {b})", "or": "({a} | {b})", "pow": "({a} ** {b})",
        "where": "({a} if {c} else {b})",
    }
    int_templates = {
        "add": "np.int32({a} + {b})", "sub": "np.int32({a} - {b})", "mul": "np.int32({a} * {b})",
        "neg": "np.int32(-np.int64({x}))", "abs": "np.int32(abs(np.int64({x})))",
        "maximum": "max({a}, {b})", "minimum": "min({a}, {b})", "relu": "max({x}, np.int32(0))",
    }
    functions = {
        **{op: {"float32": name, "float64": name} for op, name in _NUMPY_FUNCS.items()},
        **{op: {"float32": f"cvl.{op}_f32", "float64": f"cvl.{op}_f64"} for op in _TYPED_HELPERS},
        # libm's expf, exp2f, logf, log2f, tanhf, erf, sinf and cosf are scalar calls: the prelude's keep f32 loops
        # vectorized
        "exp": {"float32": "cvl.exp_f32", "float64": "np.exp"},
        "sin": {"float32": "cvl.sin_f32", "float64": "np.sin"},
        "cos": {"float32": "cvl.cos_f32", "float64": "np.cos"},
        "tanh": {"float32": "cvl.tanh_f32", "float64": "np.tanh"},
        "exp2": {"float32": "cvl.exp2_f32", "float64": "np.exp2"},
        "log": {"float32": "cvl.log_f32", "float64": "np.log"},
        "log2": {"float32": "cvl.log2_f32", "float64": "np.log2"},
        "erf": {"float32": "cvl.erf_f32", "float64": "math.erf"},
    }

    def literal(self, value, dtype: DType) -> str:
        if dtype is DType.BOOL:
            return "True" if value else "False"
        if dtype is DType.I32:
            return f"np.int32({int(value)})"
        ctype = self.ctype(dtype)
        v = float(value)
        if math.isnan(v):
            return f"np.{ctype}(np.nan)"
        if math.isinf(v):
            return f"np.{ctype}({'-' if v < 0 else ''}np.inf)"
        return f"np.{ctype}({v!r})"

    def cast(self, x: str, src: DType, dst: DType) -> str:
        if src is dst or (src.compute is dst and src in (DType.F16, DType.BF16)):
            return x
        if src is DType.BOOL:
            return f"({self.literal(1, dst)} if {x} else {self.literal(0, dst)})"
        if dst is DType.BOOL:
            return f"({x} != {self.literal(0, src)})"
        if dst in (DType.F16, DType.BF16):
            if src is DType.F64:
                x = f"cvl.narrow_f64({x})"
            elif src is DType.I32:
                x = f"cvl.narrow_f64(np.float64({x}))"
            return self.round(x, dst)
        if dst is DType.I32:
            return f"cvl.to_i32({x})"
        return f"np.{self.ctype(dst)}({x})"

    def round(self, x: str, dtype: DType) -> str:
        return f"cvl.round_{dtype.value}({x})" if dtype in (DType.F16, DType.BF16) else x

    def load(self, ref: str, dtype: DType) -> str:
        """A stored element to its compute type."""
        return f"cvl.{dtype.value}_to_f32({ref})" if dtype in (DType.F16, DType.BF16) else ref

    def store(self, x: str, dtype: DType) -> str:
        """A compute-type value to its storage type (already rounded when named)."""
        return f"cvl.f32_to_{dtype.value}({x})" if dtype in (DType.F16, DType.BF16) else x

    def scalar_type(self, dtype: DType) -> str:
        """The numba type of a uniform argument (half types arrive as f32, already rounded)."""
        return self.ctype(dtype)

    def array_type(self, dtype: DType) -> str:
        """The numba type of a buffer argument: a flat C-contiguous array of its storage."""
        return f"{STORAGE[dtype]}[::1]"


class PythonWalk(PointWalk):
    """The point walk binding each value as a Python assignment instead of a C declaration."""

    def _bind(self, op: ir.Op, expr: str) -> str:
        name = self.fresh()
        self.emit(f"{name} = {expr}")
        return name
