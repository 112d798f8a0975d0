"""The checker: AST to typed IR, with every diagnostic of LANGUAGE.md section 6 but E401.

One walk over each pipeline resolves names, infers dtypes (weak scalars take the dtype of the
tensor they meet) and shapes (NumPy broadcasting with symbols), checks statement placement
(graphs, kernels, host statements) and emits SSA ops. An expression that fails yields
``None`` and its parents stay silent, so each fault is reported once, by the innermost rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvil_dsl.diagnostics import Diagnostic, Span, did_you_mean, error, warning
from cuvil_dsl.frontend import ast
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.ir.shapes import Mismatch, broadcast, normalize_axis, unify_dims
from cuvil_dsl.types import DType, Kind, ScalarType, Sym, TensorType, Type

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
# Most operations (SSA ops: operators, calls, conversions) one file may hold. The fusion
# planner and the renderers grow faster than linearly with a pipeline's size; this bound keeps
# `check` of any file within seconds. Real pipelines hold tens to hundreds.
MAX_OPS = 4096

_BINOPS = {
    "+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul",
    "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne", "&": "and", "|": "or",
}
REDUCTIONS = {"sum", "max", "min", "mean"}
HOST_FUNCS = {"print", "assert_finite"}
KNOWN_FUNCS = (
    set(ir.UNARY_FUNCS) | {"maximum", "minimum", "where", "cast"} | REDUCTIONS
    | {"softmax", "log_softmax", "layernorm", "rmsnorm"}
)
NORM_ARITY = {"layernorm": 3, "rmsnorm": 2}
NORM_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}


@dataclass
class Value:
    id: str
    type: Type
    span: Span
    kind: str  # "param" | "value" | "result"
    used: bool = False
    poisoned: bool = False


@dataclass
class Scope:
    """Where a statement stands: the enclosing graph and kernel block, if any."""

    graph: str | None = None
    kernel: str | None = None


@dataclass
class PipelineState:
    values: dict[str, Value] = field(default_factory=dict)
    results: dict[str, ir.Result] = field(default_factory=dict)
    bound_results: set[str] = field(default_factory=set)
    block_names: dict[str, Span] = field(default_factory=dict)
    constraints: list[ir.Constraint] = field(default_factory=list)
    temp: int = 0
    out: list[list] = field(default_factory=lambda: [[]])


class _TooLarge(Exception):
    """The file passed :data:`MAX_OPS`; lowering stops at the op that did."""

    def __init__(self, span: Span):
        self.span = span


class Lowerer:
    def __init__(self, path: str, poisoned: frozenset[str] = frozenset()):
        self.path = path
        self.poisoned = poisoned
        self.diags: list[Diagnostic] = []
        self.op_count = 0

    # ------------------------------------------------------------------ helpers
    def err(self, code: str, message: str, span: Span, hint: str | None = None) -> None:
        self.diags.append(error(code, message, span, hint))

    def emit(self, op: str, type_: Type, args: tuple[str, ...], span: Span, named_as: str | None = None, **attrs):
        st = self.st
        self.op_count += 1
        if self.op_count > MAX_OPS:
            raise _TooLarge(span)
        if named_as is None:
            out = f"%{st.temp}"
            st.temp += 1
        else:
            out = named_as
        st.out[-1].append(ir.Op(op, out, type_, args, span, tuple(attrs.items()), named_as is not None))
        return out, type_

    # ------------------------------------------------------------------ file
    def lower_file(self, source: ast.SourceFile) -> ir.Module:
        pipelines = []
        names: dict[str, Span] = {}
        for decl in source.pipelines:
            if decl.name in names:
                self.err("E202", f"pipeline `{decl.name}` is defined twice", decl.name_span,
                         f"the first definition is at {names[decl.name]}")
            names.setdefault(decl.name, decl.name_span)
            try:
                p = self.lower_pipeline(decl)
            except _TooLarge as exc:
                self.err("E100", f"the file holds more than {MAX_OPS} operations, the most one file may hold",
                         exc.span, "split the pipeline across files, or into smaller pipelines")
                return ir.Module(source.path, ())
            if p is not None:
                pipelines.append(p)
        return ir.Module(source.path, tuple(pipelines))

    def lower_pipeline(self, decl: ast.PipelineDecl) -> ir.Pipeline | None:
        self.st = st = PipelineState()
        n_before = len([d for d in self.diags if d.is_error])
        params = []
        for p in decl.params:
            param = self.lower_param(p)
            if param is None:
                continue
            if p.name in st.block_names:
                self.err("E202", f"parameter `{p.name}` is declared twice", p.name_span)
                continue
            st.block_names[p.name] = p.name_span
            params.append(param)
            st.values[p.name] = Value(p.name, param.type, p.name_span, "param")
        results = []
        for r in decl.results:
            t = self.lower_type(r.type, allow_scalar=False, what=f"result `{r.name}`")
            if r.name in st.block_names:
                self.err("E202", f"result `{r.name}` has the name of an earlier parameter or result", r.name_span)
                continue
            st.block_names[r.name] = r.name_span
            if isinstance(t, TensorType):
                res = ir.Result(r.name, t, r.name_span)
                results.append(res)
                st.results[r.name] = res
        self.lower_body(decl.body, Scope())
        for res in results:
            if res.name not in st.bound_results:
                self.err("E208", f"result `{res.name}` is declared but never bound", res.span,
                         f"bind it in the body: `{res.name} = ...`")
        for v in st.values.values():
            if v.used or v.poisoned:
                continue
            if v.kind == "param":
                self.diags.append(warning("W601", f"input `{v.id}` is never used", v.span,
                                          "remove the parameter, or use it"))
            elif v.kind == "value":
                self.diags.append(warning("W602", f"value `{v.id}` is computed but never used", v.span,
                                          "remove the statement, or declare it as a result"))
        if len([d for d in self.diags if d.is_error]) > n_before:
            return None
        return ir.Pipeline(decl.name, tuple(params), tuple(results), tuple(st.out[0]), decl.span,
                           tuple(dict.fromkeys(st.constraints)))

    # ------------------------------------------------------------------ declarations
    def lower_type(self, spec: ast.TypeSpec, allow_scalar: bool, what: str) -> Type | None:
        dtype = DType.parse(spec.dtype)
        if dtype is None:
            self.err("E100", f"unknown dtype `{spec.dtype}`", spec.dtype_span,
                     "dtypes are f16, bf16, f32, f64, i32 and bool")
            return None
        if spec.dims is None:
            if not allow_scalar:
                self.err("E204", f"{what} must be a tensor of rank 1 or more", spec.span,
                         "declare its shape, e.g. `f32[N]`; reduce with keepdims=true to keep a size-1 axis")
                return None
            return ScalarType(dtype.kind)
        dims = []
        ok = True
        for d in spec.dims:
            if isinstance(d.value, int):
                if d.value <= 0:
                    self.err("E100", f"dimension `{d.text}` must be a positive integer", d.span)
                    ok = False
                elif d.value > I32_MAX:
                    self.err("E100", f"dimension `{d.text}` does not fit in i32", d.span)
                    ok = False
                dims.append(d.value)
            elif d.text[0].isdigit() or d.text[0] == ".":
                self.err("E100", f"dimension `{d.text}` must be a positive integer or a symbol", d.span)
                ok = False
            else:
                dims.append(Sym(d.text))
        return TensorType(dtype, tuple(dims)) if ok else None

    def lower_param(self, p: ast.ParamDecl) -> ir.Param | None:
        t = self.lower_type(p.type, allow_scalar=True, what=f"parameter `{p.name}`")
        if t is None:
            return None
        dtype = DType(p.type.dtype)
        default = None
        if p.default is not None:
            if isinstance(t, TensorType):
                self.err("E100", f"tensor parameter `{p.name}` cannot take a default", p.default.span,
                         "only scalar parameters take defaults")
                return None
            value = p.default.value
            if isinstance(value, bool) != (dtype.kind is Kind.BOOL) or (
                isinstance(value, float) and dtype.kind is Kind.INT
            ):
                self.err("E203", f"default `{p.default.text}` does not fit a {dtype.value} parameter", p.default.span)
                return None
            if isinstance(value, int) and not isinstance(value, bool) and not I32_MIN <= value <= I32_MAX:
                self.err("E100", f"integer literal `{p.default.text}` does not fit in i32", p.default.span)
                return None
            default = float(value) if dtype.kind is Kind.FLOAT and not isinstance(value, bool) else value
        return ir.Param(p.name, t, dtype, p.name_span, default)

    # ------------------------------------------------------------------ statements
    def lower_body(self, body: tuple[ast.Stmt, ...], scope: Scope) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                self.lower_assign(stmt)
            elif isinstance(stmt, ast.BlockStmt):
                self.lower_block(stmt, scope)
            elif isinstance(stmt, ast.Sync):
                if self.host_allowed(stmt.span, "sync", scope):
                    self.st.out[-1].append(ir.HostStmt("sync", None, stmt.span))
            else:
                self.lower_host_call(stmt, scope)

    def host_allowed(self, span: Span, what: str, scope: Scope) -> bool:
        if scope.kernel is not None:
            self.err("E403", f"host statement `{what}` inside kernel block `{scope.kernel}`", span,
                     "move it after the kernel block (and outside every graph)")
            return False
        if scope.graph is not None:
            self.err("E301", f"host statement `{what}` inside graph `{scope.graph}`", span,
                     "it makes the host wait for the device, which a graph cannot capture; move it after the graph")
            return False
        return True

    def lower_block(self, b: ast.BlockStmt, scope: Scope) -> None:
        st = self.st
        if b.kind == "graph" and (scope.graph is not None or scope.kernel is not None):
            where = f"graph `{scope.graph}`" if scope.kernel is None else f"kernel block `{scope.kernel}`"
            self.err("E302", f"graph `{b.name}` inside {where}", b.keyword_span, "graphs do not nest; close the outer block first")
        elif b.kind == "kernel" and scope.kernel is not None:
            self.err("E303", f"kernel block `{b.name}` inside kernel block `{scope.kernel}`", b.keyword_span,
                     "kernel blocks do not nest")
        if b.name in st.block_names:
            self.err("E202", f"`{b.name}` is already the name of a parameter, result, graph or kernel", b.name_span,
                     f"first bound at {st.block_names[b.name]}")
        else:
            st.block_names[b.name] = b.name_span
        inner = Scope(b.name if b.kind == "graph" else scope.graph, b.name if b.kind == "kernel" else scope.kernel)
        st.out.append([])
        self.lower_body(b.body, inner)
        body = st.out.pop()
        st.out[-1].append(ir.Block(b.kind, b.name, tuple(body), b.span))

    def lower_host_call(self, c: ast.HostCall, scope: Scope) -> None:
        if c.func not in HOST_FUNCS:
            self.err("E100", f"a call to `{c.func}` is not a statement", c.func_span,
                     "bind its value: `name = ...`; the only host calls are print(x) and assert_finite(x)")
            return
        if not self.host_allowed(c.span, f"{c.func}(...)", scope):
            return
        if c.keywords or len(c.args) != 1 or not isinstance(c.args[0], ast.Name):
            bad = c.keywords[0].span if c.keywords else (c.args[1].span if len(c.args) > 1 else (
                c.args[0].span if c.args else c.span))
            self.err("E207", f"`{c.func}` takes exactly one name", bad, f"write `{c.func}(x)` with a bound value x")
            return
        name = c.args[0]
        v = self.lookup(name)
        if v is not None:
            self.st.out[-1].append(ir.HostStmt(c.func, v.id, c.span))

    def lookup(self, name: ast.Name) -> Value | None:
        v = self.st.values.get(name.id)
        if v is None:
            if name.id in self.poisoned:
                return None
            hint = None
            if name.id in self.st.results:
                hint = f"result `{name.id}` is used before it is bound"
            self.err("E201", f"undefined name `{name.id}`", name.span, hint)
            return None
        v.used = True
        return None if v.poisoned else v

    def lower_assign(self, a: ast.Assign) -> None:
        st = self.st
        target = a.target
        existing = st.values.get(target)
        if existing is not None and existing.kind == "param":
            self.err("E209", f"`{target}` is an input parameter and cannot be assigned", a.target_span,
                     "bind a new name instead")
            self.lower_expr(a.value)
            return
        if existing is not None or target in st.bound_results:
            first = f"; first bound at {existing.span}" if existing else ""
            self.err("E202", f"`{target}` is bound twice", a.target_span, f"every name is bound once{first}")
            self.lower_expr(a.value)
            return
        mark = len(st.out[-1])
        got = self.lower_expr(a.value)
        kind = "result" if target in st.results else "value"
        if got is None:
            st.values[target] = Value(target, ScalarType(Kind.FLOAT), a.target_span, kind, poisoned=True)
            st.bound_results.discard(target)
            if kind == "result":
                st.bound_results.add(target)
            return
        vid, t = got
        if kind == "result":
            res = st.results[target]
            st.bound_results.add(target)
            if not self.check_result(res, t, a.target_span):
                st.values[target] = Value(target, res.type, a.target_span, kind, used=True, poisoned=True)
                return
        # Name the expression's last op after the target; a bare reference becomes a copy.
        last = st.out[-1][-1] if len(st.out[-1]) > mark else None
        if isinstance(last, ir.Op) and last.out == vid and vid.startswith("%"):
            st.out[-1][-1] = ir.Op(last.op, target, last.type, last.args, last.span, last.attrs, True)
        else:
            self.emit("copy", t, (vid,), a.value.span, named_as=target)
        st.values[target] = Value(target, t, a.target_span, kind, used=(kind == "result"))

    def check_result(self, res: ir.Result, t: Type, span: Span) -> bool:
        if isinstance(t, ScalarType):
            self.err("E204", f"result `{res.name}` is declared {res.type} but is bound to a scalar", span,
                     "results are tensors of rank 1 or more")
            return False
        if t.dtype is not res.type.dtype:
            self.err("E203", f"result `{res.name}` is declared {res.type.dtype.value} but bound to "
                             f"{t.dtype.value}", span, f"use cast(..., {res.type.dtype.value})")
            return False
        if len(t.shape) != len(res.type.shape):
            self.err("E204", f"result `{res.name}` is declared {res.type} but bound to shape "
                             f"{str(t)[len(t.dtype.value):]}", span)
            return False
        for want, have in zip(res.type.shape, t.shape):
            if isinstance(unify_dims(want, have, span, f"result `{res.name}`", self.st.constraints), Mismatch):
                self.err("E204", f"result `{res.name}` is declared {res.type} but bound to shape "
                                 f"{str(t)[len(t.dtype.value):]}", span)
                return False
        return True

    # ------------------------------------------------------------------ expressions
    def lower_expr(self, e: ast.Expr):
        if isinstance(e, ast.Paren):
            return self.lower_expr(e.inner)
        if isinstance(e, ast.Name):
            v = self.lookup(e)
            return None if v is None else (v.id, v.type)
        if isinstance(e, ast.Number):
            if not e.is_float and not I32_MIN <= e.value <= I32_MAX:
                self.err("E100", f"integer literal `{e.text}` does not fit in i32", e.span,
                         "write it as a float literal, e.g. `3.0e9`")
                return None
            kind = Kind.FLOAT if e.is_float else Kind.INT
            return self.emit("const", ScalarType(kind), (), e.span, value=e.value)
        if isinstance(e, ast.Bool):
            return self.emit("const", ScalarType(Kind.BOOL), (), e.span, value=e.value)
        if isinstance(e, ast.Unary):
            return self.lower_unary(e)
        if isinstance(e, ast.Binary):
            return self.lower_binary(e)
        if isinstance(e, ast.Transpose):
            x = self.lower_expr(e.operand)
            if x is None:
                return None
            if not isinstance(x[1], TensorType) or x[1].rank < 2:
                self.err("E204", f"`.T` needs a tensor of rank 2 or more, not {x[1]}", e.op_span)
                return None
            s = x[1].shape
            return self.emit("transpose", TensorType(x[1].dtype, s[:-2] + (s[-1], s[-2])), (x[0],), e.op_span)
        if isinstance(e, ast.Call):
            return self.lower_call(e)
        raise AssertionError(f"unknown expression {e!r}")

    def lower_unary(self, e: ast.Unary):
        x = self.lower_expr(e.operand)
        if x is None:
            return None
        kind = x[1].kind
        if e.op == "-":
            if kind is Kind.BOOL:
                self.err("E203", "unary `-` on a bool value", e.op_span, "use `~` for logical not, or cast first")
                return None
            return self.emit("neg", x[1], (x[0],), e.op_span)
        if kind is not Kind.BOOL:
            self.err("E203", f"`~` needs a bool value, not {x[1]}", e.op_span, "compare first, e.g. `~(x > 0)`")
            return None
        return self.emit("not", x[1], (x[0],), e.op_span)

    def lower_binary(self, e: ast.Binary):
        left = self.lower_expr(e.left)
        right = self.lower_expr(e.right)
        if left is None or right is None:
            return None
        op = _BINOPS[e.op]
        if op == "matmul":
            return self.lower_matmul(left, right, e.op_span)
        return self.elementwise(op, [left, right], e.op_span, e.op)

    def lower_matmul(self, a, b, span: Span):
        (aid, at), (bid, bt) = a, b
        for t in (at, bt):
            if not isinstance(t, TensorType) or t.rank < 2:
                self.err("E204", f"`@` needs tensors of rank 2 or more, not {t}", span)
                return None
        if not at.dtype.is_float or not bt.dtype.is_float:
            self.err("E203", f"`@` needs floating tensors, not {at.dtype.value} and {bt.dtype.value}", span,
                     "cast the operands to a float dtype")
            return None
        if at.dtype is not bt.dtype:
            self.err("E203", f"`@` of {at.dtype.value} and {bt.dtype.value}", span,
                     f"dtypes never mix silently: cast one side, e.g. cast(x, {at.dtype.value})")
            return None
        k = unify_dims(at.shape[-1], bt.shape[-2], span, "`@` inner dimension", self.st.constraints)
        if isinstance(k, Mismatch):
            self.err("E204", f"`@` inner dimensions differ: {at} @ {bt} ({k.message})", span)
            return None
        batch = broadcast([at.shape[:-2], bt.shape[:-2]], span, self.st.constraints)
        if isinstance(batch, Mismatch):
            self.err("E204", f"`@` batch dimensions: {batch.message}", span)
            return None
        out = TensorType(at.dtype, batch + (at.shape[-2], bt.shape[-1]))
        return self.emit("matmul", out, (aid, bid), span)

    def elementwise(self, op: str, operands: list, span: Span, shown: str):
        """Binary elementwise op (arithmetic, comparison, logic) with weak scalars."""
        tensors = [t for _, t in operands if isinstance(t, TensorType)]
        scalars = [t for _, t in operands if isinstance(t, ScalarType)]
        if tensors:
            dtypes = {t.dtype for t in tensors}
            if len(dtypes) > 1:
                a, b = (t.dtype.value for t in tensors[:2])
                self.err("E203", f"`{shown}` mixes {a} and {b}", span,
                         f"dtypes never mix silently: cast one side, e.g. cast(x, {a})")
                return None
            dtype = tensors[0].dtype
            kind = dtype.kind
        else:
            kinds = {t.kind for t in scalars}
            kind = Kind.FLOAT if kinds == {Kind.FLOAT, Kind.INT} else next(iter(kinds))
            if len(kinds) > 1 and Kind.BOOL in kinds:
                return self._bad_mix(op, shown, span, "bool and a number")
            dtype = None
        for t in scalars:
            if tensors and not _scalar_fits(t.kind, dtype):
                what = {Kind.FLOAT: "a float scalar", Kind.INT: "an integer scalar", Kind.BOOL: "a bool"}[t.kind]
                hint = "a float literal never meets an i32 tensor: cast the tensor" if dtype is DType.I32 else "cast first"
                self.err("E203", f"`{shown}` of {_article(dtype.value)} tensor and {what}", span, hint)
                return None
        result_kind = self._result_kind(op, kind, shown, span, dtype)
        if result_kind is None:
            return None
        if not tensors:
            out_kind = result_kind
            if op in ("div", "pow") and kind is Kind.INT:
                out_kind = Kind.FLOAT
            return self.emit(op, ScalarType(out_kind), tuple(v for v, _ in operands), span)
        args = []
        for vid, t in operands:
            if isinstance(t, ScalarType):
                vid, t = self.emit("to_tensor", TensorType(dtype, ()), (vid,), span, dtype=dtype.value)
            args.append((vid, t))
        shape = broadcast([t.shape for _, t in args], span, self.st.constraints)
        if isinstance(shape, Mismatch):
            self.err("E204", f"`{shown}`: {shape.message}", span)
            return None
        out_dtype = DType.BOOL if result_kind is Kind.BOOL else dtype
        return self.emit(op, TensorType(out_dtype, shape), tuple(v for v, _ in args), span)

    def _bad_mix(self, op, shown, span, what):
        self.err("E203", f"`{shown}` of {what}", span, "cast first")
        return None

    def _result_kind(self, op: str, kind: Kind, shown: str, span: Span, dtype: DType | None) -> Kind | None:
        if op in ir.LOGIC_OPS:
            if kind is not Kind.BOOL:
                self.err("E203", f"`{shown}` needs bool operands", span, "compare first, e.g. `(x > 0) & (y > 0)`")
                return None
            return Kind.BOOL
        if op in ir.COMPARE_OPS:
            if kind is Kind.BOOL and op not in ("eq", "ne"):
                self.err("E203", f"`{shown}` on bool values", span, "bools compare only with == and !=")
                return None
            return Kind.BOOL
        if kind is Kind.BOOL:
            self.err("E203", f"arithmetic `{shown}` on bool values", span, "cast first, e.g. cast(mask, f32)")
            return None
        if kind is Kind.INT and dtype is DType.I32 and op in ("div", "pow"):
            self.err("E203", f"`{shown}` is not defined on i32", span, "cast to a float dtype first")
            return None
        return kind

    # ------------------------------------------------------------------ calls
    def lower_call(self, c: ast.Call):
        got = self._lower_call(c)
        if got is None:
            self.mark_used(c)  # a failed call still uses its arguments: no W601/W602 cascade
        return got

    def mark_used(self, e) -> None:
        """Mark every name under ``e`` as used, silently."""
        if isinstance(e, ast.Name):
            v = self.st.values.get(e.id)
            if v is not None:
                v.used = True
        elif isinstance(e, (ast.Call, ast.HostCall)):
            for a in (*e.args, *(k.value for k in e.keywords)):
                self.mark_used(a)
        elif isinstance(e, ast.Binary):
            self.mark_used(e.left)
            self.mark_used(e.right)
        elif isinstance(e, (ast.Unary, ast.Transpose)):
            self.mark_used(e.operand)
        elif isinstance(e, ast.Paren):
            self.mark_used(e.inner)

    def _lower_call(self, c: ast.Call):
        f = c.func
        if f in HOST_FUNCS:
            self.err("E206", f"`{f}` is a host statement, not a function", c.func_span,
                     f"write `{f}(x)` on its own line, outside graphs and kernels")
            return None
        if f not in KNOWN_FUNCS:
            self.err("E206", f"unknown function `{f}`", c.func_span, did_you_mean(f, sorted(KNOWN_FUNCS)))
            for arg in c.args:
                self.lower_expr(arg)
            return None
        for kw in c.keywords:
            if any(arg.span > kw.span for arg in c.args):
                self.err("E207", "positional argument after a keyword argument", next(
                    arg.span for arg in c.args if arg.span > kw.span))
                return None
        if f == "cast":
            return self.lower_cast(c)
        if f in REDUCTIONS:
            return self.lower_reduction(c)
        if f in ("softmax", "log_softmax"):
            return self.lower_softmax(c)
        if f in NORM_ARITY:
            return self.lower_norm(c)
        if not self.check_arity(c, 3 if f == "where" else 2 if f in ("maximum", "minimum") else 1, ()):
            return None
        args = [self.lower_expr(a) for a in c.args]
        if any(a is None for a in args):
            return None
        if f in ("maximum", "minimum"):
            return self.elementwise(f, args, c.func_span, f)
        if f == "where":
            return self.lower_where(c, args)
        return self.lower_unary_func(c, args[0])

    def check_arity(self, c: ast.Call, count: int | tuple[int, ...], keywords: tuple[str, ...]) -> bool:
        counts = (count,) if isinstance(count, int) else count
        if len(c.args) not in counts:
            want = " or ".join(str(n) for n in counts)
            span = c.args[max(counts)].span if len(c.args) > max(counts) else c.span
            self.err("E207", f"`{c.func}` takes {want} positional argument{'s' if counts != (1,) else ''}, "
                             f"got {len(c.args)}", span)
            return False
        seen = set()
        for kw in c.keywords:
            if kw.name not in keywords:
                allowed = ", ".join(f"`{k}`" for k in keywords) or "none"
                self.err("E207", f"`{c.func}` has no keyword `{kw.name}`", kw.name_span, f"keywords: {allowed}")
                return False
            if kw.name in seen:
                self.err("E207", f"keyword `{kw.name}` given twice", kw.name_span)
                return False
            seen.add(kw.name)
        return True

    def constant(self, kw: ast.Keyword) -> int | float | bool | None:
        v = kw.value
        if isinstance(v, ast.Paren):
            v = v.inner
        if isinstance(v, ast.Bool):
            return v.value
        if isinstance(v, ast.Number):
            return v.value
        if isinstance(v, ast.Unary) and v.op == "-" and isinstance(v.operand, ast.Number):
            return -v.operand.value
        self.err("E207", f"keyword `{kw.name}` needs a constant", kw.span,
                 "write a number (optionally with a leading `-`) or true/false")
        return None

    def keyword_values(self, c: ast.Call) -> dict[str, tuple]:
        out = {}
        for kw in c.keywords:
            val = self.constant(kw)
            if val is None:
                return None  # type: ignore[return-value]
            out[kw.name] = (val, kw)
        return out

    def tensor_arg(self, c: ast.Call, expr: ast.Expr, what: str = "a tensor"):
        got = self.lower_expr(expr)
        if got is None:
            return None
        if not isinstance(got[1], TensorType):
            self.err("E207", f"`{c.func}` needs {what}, not a scalar", expr.span)
            return None
        return got

    def axis_arg(self, c: ast.Call, kws: dict, rank: int, default: int | None):
        if "axis" not in kws:
            if default is None:
                self.err("E207", f"`{c.func}` needs `axis=`", c.span, f"e.g. `{c.func}(x, axis=-1)`")
                return None
            value, span = default, c.span
        else:
            value, kw = kws["axis"]
            span = kw.span
            if isinstance(value, bool) or not isinstance(value, int):
                self.err("E207", "`axis` must be an integer", kw.value.span)
                return None
        axis = normalize_axis(value, rank)
        if axis is None:
            self.err("E205", f"axis {value} is out of range for rank {rank}", span,
                     f"valid axes are {-rank}..{rank - 1}" if rank else "the operand has no axes")
        return axis

    def lower_cast(self, c: ast.Call):
        if not self.check_arity(c, 2, ()):
            return None
        target = c.args[1]
        dtype = DType.parse(target.id) if isinstance(target, ast.Name) else None
        if dtype is None:
            self.err("E207", "the second argument of `cast` must be a dtype", target.span,
                     "one of f16, bf16, f32, f64, i32, bool")
            return None
        x = self.lower_expr(c.args[0])
        if x is None:
            return None
        shape = x[1].shape if isinstance(x[1], TensorType) else ()
        return self.emit("cast", TensorType(dtype, shape), (x[0],), c.func_span, dtype=dtype.value)

    def lower_reduction(self, c: ast.Call):
        if not self.check_arity(c, 1, ("axis", "keepdims")):
            return None
        kws = self.keyword_values(c)
        if kws is None:
            return None
        x = self.tensor_arg(c, c.args[0])
        if x is None:
            return None
        t: TensorType = x[1]
        axis = self.axis_arg(c, kws, t.rank, None)
        if axis is None:
            return None
        keepdims = False
        if "keepdims" in kws:
            keepdims, kw = kws["keepdims"]
            if not isinstance(keepdims, bool):
                self.err("E207", "`keepdims` must be true or false", kw.value.span)
                return None
        if t.dtype is DType.BOOL or (t.dtype is DType.I32 and c.func == "mean"):
            self.err("E203", f"`{c.func}` of {_article(t.dtype.value)} tensor", c.func_span, "cast to a float dtype first")
            return None
        shape = t.shape[:axis] + ((1,) if keepdims else ()) + t.shape[axis + 1:]
        return self.emit(c.func, TensorType(t.dtype, shape), (x[0],), c.func_span, axis=axis, keepdims=keepdims)

    def lower_softmax(self, c: ast.Call):
        if not self.check_arity(c, 1, ("axis",)):
            return None
        kws = self.keyword_values(c)
        if kws is None:
            return None
        x = self.tensor_arg(c, c.args[0])
        if x is None:
            return None
        t: TensorType = x[1]
        axis = self.axis_arg(c, kws, t.rank, -1)
        if axis is None:
            return None
        if not t.dtype.is_float:
            self.err("E203", f"`{c.func}` of {_article(t.dtype.value)} tensor", c.func_span, "cast to a float dtype first")
            return None
        return self.emit(c.func, t, (x[0],), c.func_span, axis=axis)

    def lower_norm(self, c: ast.Call):
        n = NORM_ARITY[c.func]
        if not self.check_arity(c, tuple(range(1, n + 1)), ("eps",)):
            return None
        kws = self.keyword_values(c)
        if kws is None:
            return None
        eps = NORM_EPS[c.func]
        if "eps" in kws:
            eps, kw = kws["eps"]
            if isinstance(eps, bool) or eps < 0:
                self.err("E207", "`eps` must be a non-negative number", kw.value.span)
                return None
            eps = float(eps)
        x = self.tensor_arg(c, c.args[0])
        if x is None:
            return None
        t: TensorType = x[1]
        if not t.dtype.is_float:
            self.err("E203", f"`{c.func}` of {_article(t.dtype.value)} tensor", c.func_span, "cast to a float dtype first")
            return None
        if t.rank < 1:
            self.err("E205", f"`{c.func}` normalises the last axis, but its operand has rank 0", c.args[0].span)
            return None
        ids = [x[0]]
        for i, expr in enumerate(c.args[1:]):
            what = ("weight", "bias")[i]
            got = self.tensor_arg(c, expr, f"a {what} tensor")
            if got is None:
                return None
            wt: TensorType = got[1]
            if wt.dtype is not t.dtype:
                self.err("E203", f"{what} of `{c.func}` is {wt.dtype.value}, its input is {t.dtype.value}", expr.span,
                         f"cast it: cast(w, {t.dtype.value})")
                return None
            ok = wt.rank == 1 and not isinstance(
                unify_dims(wt.shape[0], t.shape[-1], expr.span, f"{c.func} {what}", self.st.constraints), Mismatch)
            if not ok:
                self.err("E204", f"{what} of `{c.func}` must have shape [{t.shape[-1]}] (the last axis), not "
                                 f"{str(wt)[len(wt.dtype.value):]}", expr.span)
                return None
            ids.append(got[0])
        return self.emit(c.func, t, tuple(ids), c.func_span, eps=eps)

    def lower_where(self, c: ast.Call, args):
        (cid, ct), a, b = args
        if ct.kind is not Kind.BOOL:
            self.err("E203", f"the condition of `where` must be bool, not {ct}", c.args[0].span,
                     "compare first, e.g. where(x > 0, x, 0)")
            return None
        branch_tensors = [t for _, t in (a, b) if isinstance(t, TensorType)]
        if branch_tensors:
            dtypes = {t.dtype for t in branch_tensors}
            if len(dtypes) > 1:
                x, y = (t.dtype.value for t in branch_tensors)
                self.err("E203", f"`where` branches are {x} and {y}", c.func_span, f"cast one branch, e.g. cast(b, {x})")
                return None
            dtype = branch_tensors[0].dtype
            for (_, t), expr in zip((a, b), c.args[1:]):
                if isinstance(t, ScalarType) and not _scalar_fits(t.kind, dtype):
                    self.err("E203", f"`where` branch of kind {t.kind.value} meets a {dtype.value} tensor", expr.span,
                             "cast first")
                    return None
        else:
            kinds = {a[1].kind, b[1].kind}
            if Kind.BOOL in kinds and len(kinds) > 1:
                self.err("E203", "`where` branches mix bool and a number", c.func_span, "cast first")
                return None
            if isinstance(ct, ScalarType):
                kind = Kind.FLOAT if Kind.FLOAT in kinds else next(iter(kinds))
                return self.emit("where", ScalarType(kind), (cid, a[0], b[0]), c.func_span)
            dtype = DType.BOOL if kinds == {Kind.BOOL} else DType.F32 if Kind.FLOAT in kinds else DType.I32
        ops = []
        for vid, t in ((cid, ct), a, b):
            if isinstance(t, ScalarType):
                want = DType.BOOL if vid == cid else dtype
                vid, t = self.emit("to_tensor", TensorType(want, ()), (vid,), c.func_span, dtype=want.value)
            ops.append((vid, t))
        shape = broadcast([t.shape for _, t in ops], c.func_span, self.st.constraints)
        if isinstance(shape, Mismatch):
            self.err("E204", f"`where`: {shape.message}", c.func_span)
            return None
        return self.emit("where", TensorType(dtype, shape), tuple(v for v, _ in ops), c.func_span)

    def lower_unary_func(self, c: ast.Call, x):
        vid, t = x
        f = c.func
        if t.kind is Kind.BOOL:
            self.err("E203", f"`{f}` of a bool value", c.func_span, "cast first, e.g. cast(mask, f32)")
            return None
        if isinstance(t, TensorType):
            if t.dtype is DType.I32 and f in ir.FLOAT_ONLY_UNARY:
                self.err("E203", f"`{f}` of an i32 tensor", c.func_span, "cast to a float dtype first")
                return None
            return self.emit(f, t, (vid,), c.func_span)
        out = t if f in ("abs", "relu") else ScalarType(Kind.FLOAT)
        return self.emit(f, out, (vid,), c.func_span)


def _article(word: str) -> str:
    return ("an " if word[0] in "aefhilmnorsx" else "a ") + word


def _scalar_fits(kind: Kind, dtype: DType) -> bool:
    """May a weak scalar of ``kind`` meet a tensor of ``dtype``?"""
    if dtype.kind is Kind.BOOL:
        return kind is Kind.BOOL
    if dtype.kind is Kind.INT:
        return kind is Kind.INT
    return kind in (Kind.FLOAT, Kind.INT)


def lower(source: ast.SourceFile, poisoned: frozenset[str] = frozenset()) -> tuple[ir.Module, list[Diagnostic]]:
    low = Lowerer(source.path, poisoned)
    module = low.lower_file(source)
    return module, sorted(low.diags, key=Diagnostic.sort_key)
