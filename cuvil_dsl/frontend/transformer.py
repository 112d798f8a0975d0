"""Parse tree to AST. Builds nodes and spans and nothing else: no checks live here."""

from __future__ import annotations

from lark import Token, Transformer, v_args

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.frontend import ast


class ToAst(Transformer):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    # -- spans ---------------------------------------------------------------
    def _span(self, meta) -> Span:
        return Span(self.path, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, tok: Token) -> Span:
        return Span(self.path, tok.line, tok.column, tok.end_line, tok.end_column)

    def _join(self, a: Span, b: Span) -> Span:
        return Span(self.path, a.line, a.column, b.end_line, b.end_column)

    # -- file and declarations -------------------------------------------------
    def start(self, children):
        return ast.SourceFile(self.path, tuple(children))

    @v_args(meta=True)
    def pipeline(self, meta, children):
        name, *rest = children
        params = tuple(c for c in rest if isinstance(c, ast.ParamDecl))
        results = next(c for c in rest if isinstance(c, tuple))
        body = rest[-1]
        return ast.PipelineDecl(str(name), self._tok(name), params, results, body, self._span(meta))

    def single_result(self, children):
        return tuple(children)

    def result_tuple(self, children):
        return tuple(children)

    @v_args(meta=True)
    def param(self, meta, children):
        name, type_spec, default = children
        return ast.ParamDecl(str(name), self._tok(name), type_spec, default, self._span(meta))

    @v_args(meta=True)
    def result(self, meta, children):
        name, type_spec = children
        return ast.ResultDecl(str(name), self._tok(name), type_spec, self._span(meta))

    @v_args(meta=True)
    def type_spec(self, meta, children):
        dtype, *dims = children
        shape = None if not dims or dims == [None] else tuple(dims)
        return ast.TypeSpec(str(dtype), self._tok(dtype), shape, self._span(meta))

    def dim(self, children):
        (tok,) = children
        value = int(tok) if tok.type == "NUMBER" and tok.isdigit() else str(tok)
        return ast.Dim(value, str(tok), self._tok(tok))

    def default_number(self, children):
        (tok,) = children
        num = ast.Number(str(tok), self._tok(tok))
        return ast.Default(num.value, str(tok), num.span)

    def default_negative(self, children):
        minus, tok = children
        num = ast.Number(str(tok), self._tok(tok))
        return ast.Default(-num.value, "-" + str(tok), self._join(self._tok(minus), num.span))

    def default_true(self, children):
        return ast.Default(True, "true", self._tok(children[0]))

    def default_false(self, children):
        return ast.Default(False, "false", self._tok(children[0]))

    # -- statements ------------------------------------------------------------
    def block(self, children):
        return tuple(c for c in children if c is not None and not isinstance(c, Token))

    @v_args(meta=True)
    def assign(self, meta, children):
        target, value = children
        return ast.Assign(str(target), self._tok(target), value, self._span(meta))

    def _block_stmt(self, kind, meta, children):
        name, body = children
        span = self._span(meta)
        keyword = Span(self.path, span.line, span.column, span.line, span.column + len(kind))
        return ast.BlockStmt(kind, str(name), self._tok(name), body, span, keyword)

    @v_args(meta=True)
    def graph_block(self, meta, children):
        return self._block_stmt("graph", meta, children)

    @v_args(meta=True)
    def kernel_block(self, meta, children):
        return self._block_stmt("kernel", meta, children)

    def sync_stmt(self, children):
        return ast.Sync(self._tok(children[0]))

    @v_args(meta=True)
    def host_call(self, meta, children):
        func, *args = children
        positional, keywords = _split_args(args)
        return ast.HostCall(str(func), positional, keywords, self._span(meta), self._tok(func))

    # -- expressions -------------------------------------------------------------
    @v_args(meta=True)
    def binop(self, meta, children):
        left, op, right = children
        return ast.Binary(str(op), left, right, self._span(meta), self._tok(op))

    @v_args(meta=True)
    def unop(self, meta, children):
        op, operand = children
        return ast.Unary(str(op), operand, self._span(meta), self._tok(op))

    @v_args(meta=True)
    def transpose(self, meta, children):
        operand, op = children
        return ast.Transpose(operand, self._span(meta), self._tok(op))

    def name(self, children):
        (tok,) = children
        return ast.Name(str(tok), self._tok(tok))

    def number(self, children):
        (tok,) = children
        return ast.Number(str(tok), self._tok(tok))

    def true(self, children):
        return ast.Bool(True, self._tok(children[0]))

    def false(self, children):
        return ast.Bool(False, self._tok(children[0]))

    @v_args(meta=True)
    def paren(self, meta, children):
        (inner,) = children
        return ast.Paren(inner, self._span(meta))

    @v_args(meta=True)
    def call(self, meta, children):
        func, *args = children
        positional, keywords = _split_args(args)
        return ast.Call(str(func), positional, keywords, self._span(meta), self._tok(func))

    @v_args(meta=True)
    def keyword(self, meta, children):
        name, value = children
        return ast.Keyword(str(name), value, self._span(meta), self._tok(name))


def _split_args(args):
    args = [a for a in args if a is not None]
    positional = tuple(a for a in args if not isinstance(a, ast.Keyword))
    keywords = tuple(a for a in args if isinstance(a, ast.Keyword))
    return positional, keywords
