"""The typed, immutable IR every backend and the reference consume.

A pipeline is a list of statements. An :class:`Op` is one SSA operation: it defines one value
(``out``), either a user binding (``named=True``; its value is rounded to its dtype there, so
results never depend on fusion) or a temporary ``%N``. Graph and kernel blocks keep the
boundaries the program declared; host statements stand where they were written. Every node
keeps the span of the source it came from.

Opcodes (``Op.op``) and their attributes:

=================  ===========================================================================
``const``          weak scalar literal; ``value``
``to_tensor``      weak scalar to a rank-0 tensor, rounded (saturating) to ``dtype``
``copy``           ``y = x``
unary              ``neg not abs exp exp2 log log2 sqrt rsqrt sin cos tanh erf sigmoid relu
                   gelu gelu_tanh silu``
binary             ``add sub mul div pow maximum minimum lt le gt ge eq ne and or``
``where``          ``where c, a, b``
``cast``           ``dtype``
``transpose``      swap the last two axes (a view)
``matmul``         ``[..., M, K] @ [..., K, N]`` with broadcast batch dims
reductions         ``sum max min mean``; ``axis`` (non-negative), ``keepdims``
``softmax``        ``axis``; also ``log_softmax``
``layernorm``      ``x[, w[, b]]``, ``eps``
``rmsnorm``        ``x[, w]``, ``eps``
=================  ===========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Union

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.types import DType, ScalarType, TensorType, Type

UNARY_FUNCS = (
    "abs exp exp2 log log2 sqrt rsqrt sin cos tanh erf sigmoid relu gelu gelu_tanh silu".split()
)
FLOAT_ONLY_UNARY = tuple(f for f in UNARY_FUNCS if f not in ("abs", "relu"))
UNARY_OPS = ("neg", "not", *UNARY_FUNCS)
ARITH_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_OPS = ("and", "or")
BINARY_OPS = ARITH_OPS + COMPARE_OPS + LOGIC_OPS
ELEMENTWISE_OPS = frozenset(("const", "to_tensor", "copy", "where", "cast", *UNARY_OPS, *BINARY_OPS))
REDUCE_OPS = ("sum", "max", "min", "mean")
ROW_OPS = ("softmax", "log_softmax", "layernorm", "rmsnorm")


@dataclass(frozen=True)
class Op:
    op: str
    out: str
    type: Type
    args: tuple[str, ...]
    span: Span
    attrs: tuple[tuple[str, object], ...] = ()
    named: bool = False

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def is_scalar(self) -> bool:
        return isinstance(self.type, ScalarType)


@dataclass(frozen=True)
class HostStmt:
    kind: str  # "sync" | "print" | "assert_finite"
    arg: str | None
    span: Span


@dataclass(frozen=True)
class Block:
    kind: str  # "graph" | "kernel"
    name: str
    body: tuple["Stmt", ...]
    span: Span


Stmt = Union[Op, HostStmt, Block]


@dataclass(frozen=True)
class Param:
    name: str
    type: Type  # TensorType, or ScalarType for scalar parameters
    declared: DType  # the declared dtype (for scalars it fixes only the kind)
    span: Span
    default: float | int | bool | None = None

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)


@dataclass(frozen=True)
class Result:
    name: str
    type: TensorType
    span: Span


@dataclass(frozen=True)
class Constraint:
    """A symbol that must equal a literal size, checked when shapes are bound (E204 here)."""

    symbol: str
    size: int
    span: Span
    why: str


@dataclass(frozen=True)
class Pipeline:
    name: str
    params: tuple[Param, ...]
    results: tuple[Result, ...]
    body: tuple[Stmt, ...]
    span: Span
    constraints: tuple[Constraint, ...] = field(default=())

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def tensor_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_tensor)

    @property
    def scalar_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_tensor)

    def ops(self) -> Iterator[Op]:
        """Every op in program order, blocks flattened."""
        for stmt, _graph, _kernel in walk(self.body):
            if isinstance(stmt, Op):
                yield stmt

    def value_types(self) -> dict[str, Type]:
        types: dict[str, Type] = {p.name: p.type for p in self.params}
        for op in self.ops():
            types[op.out] = op.type
        return types

    def symbols(self) -> list[str]:
        """Every symbol of the pipeline's parameters and results, in order of first appearance."""
        seen: list[str] = []
        for p in (*self.params, *self.results):
            if isinstance(p.type, TensorType):
                for d in p.type.shape:
                    if not isinstance(d, int) and d.name not in seen:
                        seen.append(d.name)
        for op in self.ops():
            if isinstance(op.type, TensorType):
                for d in op.type.shape:
                    if not isinstance(d, int) and d.name not in seen:
                        seen.append(d.name)
        return seen


@dataclass(frozen=True)
class Module:
    file: str
    pipelines: tuple[Pipeline, ...]

    def pipeline(self, name: str | None) -> Pipeline | None:
        if name is None:
            return self.pipelines[0] if len(self.pipelines) == 1 else None
        return next((p for p in self.pipelines if p.name == name), None)


def ancestors(ops: Mapping[str, Op], value: str) -> set[str]:
    """The values ``value`` is computed from, itself included, through ``ops`` (each op by the value it defines;
    a name not among them, a parameter, ends a path)."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(ops[v].args if v in ops else ())
    return seen


def walk(body: tuple[Stmt, ...], graph: str | None = None, kernel: str | None = None):
    """Yield ``(stmt, enclosing graph name, enclosing kernel-block name)`` depth-first."""
    for stmt in body:
        if isinstance(stmt, Block):
            yield stmt, graph, kernel
            if stmt.kind == "graph":
                yield from walk(stmt.body, stmt.name, kernel)
            else:
                yield from walk(stmt.body, graph, stmt.name)
        else:
            yield stmt, graph, kernel
