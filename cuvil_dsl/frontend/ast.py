"""The abstract syntax tree: frozen dataclasses, every node with the span it came from.

Built by :mod:`cuvil_dsl.frontend.transformer` and nothing else; all meaning (names, types,
shapes) is given by the checker in :mod:`cuvil_dsl.ir.lower`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from cuvil_dsl.diagnostics import Span


@dataclass(frozen=True)
class Name:
    id: str
    span: Span


@dataclass(frozen=True)
class Number:
    text: str
    span: Span

    @property
    def is_float(self) -> bool:
        return any(c in self.text for c in ".eE")

    @property
    def value(self) -> int | float:
        return float(self.text) if self.is_float else int(self.text)


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span


@dataclass(frozen=True)
class Unary:
    op: str  # "-" | "~"
    operand: "Expr"
    span: Span
    op_span: Span


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / @ ** < <= > >= == != & |
    left: "Expr"
    right: "Expr"
    span: Span
    op_span: Span


@dataclass(frozen=True)
class Transpose:
    operand: "Expr"
    span: Span
    op_span: Span


@dataclass(frozen=True)
class Keyword:
    name: str
    value: "Expr"
    span: Span  # the whole `name=value`
    name_span: Span


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple["Expr", ...]
    keywords: tuple[Keyword, ...]
    span: Span
    func_span: Span


@dataclass(frozen=True)
class Paren:
    inner: "Expr"
    span: Span


Expr = Union[Name, Number, Bool, Unary, Binary, Transpose, Call, Paren]


@dataclass(frozen=True)
class Assign:
    target: str
    target_span: Span
    value: Expr
    span: Span


@dataclass(frozen=True)
class BlockStmt:
    kind: str  # "graph" | "kernel"
    name: str
    name_span: Span
    body: tuple["Stmt", ...]
    span: Span  # from the keyword to the closing brace
    keyword_span: Span


@dataclass(frozen=True)
class Sync:
    span: Span


@dataclass(frozen=True)
class HostCall:
    func: str
    args: tuple[Expr, ...]
    keywords: tuple[Keyword, ...]
    span: Span
    func_span: Span


Stmt = Union[Assign, BlockStmt, Sync, HostCall]


@dataclass(frozen=True)
class Dim:
    value: str | int
    text: str
    span: Span


@dataclass(frozen=True)
class TypeSpec:
    dtype: str
    dtype_span: Span
    dims: tuple[Dim, ...] | None  # None: a scalar
    span: Span


@dataclass(frozen=True)
class Default:
    value: int | float | bool
    text: str
    span: Span


@dataclass(frozen=True)
class ParamDecl:
    name: str
    name_span: Span
    type: TypeSpec
    default: Default | None
    span: Span


@dataclass(frozen=True)
class ResultDecl:
    name: str
    name_span: Span
    type: TypeSpec
    span: Span


@dataclass(frozen=True)
class PipelineDecl:
    name: str
    name_span: Span
    params: tuple[ParamDecl, ...]
    results: tuple[ResultDecl, ...]
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True)
class SourceFile:
    path: str
    pipelines: tuple[PipelineDecl, ...]
