"""The backend-independent part of every renderer: scalar spelling tables and the point walk.

A :class:`Language` spells one scalar operation of the IR in a backend's source, from small
per-op templates (``"add": "({a} + {b})"``, ``"exp": "{f}({x})"`` with ``{f}`` the function's
name for the compute type). Backends subclass it and override only what differs. A
:class:`PointWalk` renders the values of a fused kernel at one point of its iteration space as
straight-line statements, one named local per op; kernel templates decide where the points are
(a vector lane, a row item, a GEMM accumulator) and how buffers and anchors are read.

Numerics (LANGUAGE.md section 5, as the float64 reference defines them): f16/bf16 math runs in
f32, f64 in f64, i32 wraps, bool is a boolean. A value is rounded to its dtype where it is bound
by name, whatever kernel computes it; unnamed values stay in the compute type (the planner keeps
them in registers wherever it can, since memory would round them).
"""

from __future__ import annotations

import math
from typing import Callable

from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.indexing import Map, operand_map
from cuvil_dsl.types import DType, TensorType

class Language:
    """Scalar spellings for one backend. Values are in their dtype's *compute* type."""

    compute_types = {DType.F16: "float", DType.BF16: "float", DType.F32: "float", DType.F64: "double",
                     DType.I32: "int", DType.BOOL: "bool"}
    # op -> template; {x} the operand of a unary op, {a} {b} of a binary op, {c} where's condition,
    # {f} the op's function name for the compute type (see ``functions``)
    templates = {
        "copy": "{x}", "neg": "(-{x})", "not": "(!{x})",
        "add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
        "pow": "{f}({a}, {b})", "maximum": "{f}({a}, {b})", "minimum": "{f}({a}, {b})",
        "lt": "({a} < {b})", "le": "({a} <= {b})", "gt": "({a} > {b})", "ge": "({a} >= {b})",
        "eq": "({a} == {b})", "ne": "({a} != {b})", "and": "({a} && {b})", "or": "({a} || {b})",
        "where": "({c} ? {a} : {b})",
        **{name: "{f}({x})" for name in ir.UNARY_FUNCS},
    }
    # overrides for i32 operands (wrapping arithmetic)
    int_templates: dict[str, str] = {}
    # op -> {compute type: function name}
    functions: dict[str, dict[str, str]] = {}
    # row reductions: combine template and identity per compute type
    combine = {"rsum": "add", "rmax": "maximum", "rmin": "minimum"}

    def ctype(self, dtype: DType) -> str:
        return self.compute_types[dtype]

    def template(self, op: str, operand: DType) -> str:
        if operand is DType.I32 and op in self.int_templates:
            return self.int_templates[op]
        return self.templates[op]

    def function(self, op: str, operand: DType) -> str:
        return self.functions.get(op, {}).get(self.ctype(operand), op)

    def apply(self, op: str, operand: DType, **args: str) -> str:
        """Spell ``op`` on operands of dtype ``operand`` (already rendered expressions)."""
        text = self.template(op, operand)
        if "{f}" in text:
            text = text.replace("{f}", self.function(op, operand))
        return text.format(**args)

    def literal(self, value: float | int | bool, dtype: DType) -> str:
        raise NotImplementedError

    def identity(self, reduction: str, dtype: DType) -> str:
        """The neutral element of a row reduction in ``dtype``'s compute type."""
        if reduction == "rsum":
            return self.literal(0, dtype)
        big = math.inf if dtype.is_float else 2**31 - 1
        return self.literal(-big - (0 if dtype.is_float else 1) if reduction == "rmax" else big, dtype)

    def cast(self, x: str, src: DType, dst: DType) -> str:
        raise NotImplementedError

    def round(self, x: str, dtype: DType) -> str:
        """Round a compute-type value to ``dtype`` and back (only f16/bf16 change)."""
        raise NotImplementedError


def rounded_argument(lines: list[str], prefix: str, suffix: str) -> str | None:
    """The ``X`` of the last of ``lines`` that reads ``prefix + X + suffix`` (a name bound to a rounded value:
    ``prefix`` holds the name and the rounding call), where ``X`` is one expression (its parentheses all close
    within it, so not ``a) + f(b``); None when no line does. The kernels' ``unrounded`` store such a name's
    value from ``X``, since the store rounds it the same way."""
    for line in reversed(lines):
        if line.startswith(prefix) and line.endswith(suffix):
            inner = line[len(prefix):len(line) - len(suffix)]
            depth = 0
            for ch in inner:
                depth += {"(": 1, ")": -1}.get(ch, 0)
                if depth < 0:
                    break
            if depth == 0:
                return inner
    return None


def rounds(op: ir.Op) -> bool:
    """Is ``op``'s value rounded to its dtype where it is computed? (Named values are.)"""
    return op.named


class PointWalk:
    """Renders values at one point of a kernel's iteration space, each op once per map.

    ``leaf(value, map)`` reads a buffer, ``uniforms`` spells each host-evaluated scalar,
    ``anchor(value, map)`` returns the expression of a value the template computes itself
    (a GEMM accumulator, a row statistic) or None. Statements go to ``emit``.
    """

    def __init__(self, lang: Language, ops: dict[str, ir.Op], types: dict, row_axis: int | None,
                 emit: Callable[[str], None], fresh: Callable[[], str],
                 leaf: Callable[[str, Map], str], uniforms: dict[str, str],
                 anchor: Callable[[str, Map], str | None] = lambda v, m: None):
        self.lang, self.ops, self.types, self.row_axis = lang, ops, types, row_axis
        self.emit, self.fresh, self.leaf, self.uniforms, self.anchor = emit, fresh, leaf, uniforms, anchor
        self.memo: dict[tuple, str] = {}

    def dtype(self, value: str) -> DType:
        t = self.types[value]
        assert isinstance(t, TensorType), value
        return t.dtype

    def value(self, vid: str, m: Map) -> str:
        """The expression of ``vid`` at map ``m``, emitting the statements it needs first.

        A depth-first walk over the operands, in operand order, exactly as a recursive walk
        would go (same statements, same order, same fresh names), but on an explicit stack:
        a fused kernel's dependency chain can be thousands of ops long (a chain of named
        statements), far past Python's recursion limit.
        """
        root = (vid, tuple(m))
        stack: list[list] = [[root, None]]  # [key, operand keys still to render (None: not looked at)]
        while stack:
            frame = stack[-1]
            key, todo = frame
            if todo is None:
                if key in self.memo:
                    stack.pop()
                    continue
                ready = self._terminal(*key)
                if ready is not None:
                    self.memo[key] = ready
                    stack.pop()
                    continue
                op = self.ops[key[0]]
                todo = frame[1] = [
                    (a, tuple(operand_map(op, key[1], k, self.types[a].shape, self.row_axis)))
                    for k, a in enumerate(op.args)] if op.op != "lit" else []
                todo.reverse()
            while todo and todo[-1] in self.memo:
                todo.pop()
            if todo:
                stack.append([todo[-1], None])
                continue
            self.memo[key] = self._compute(self.ops[key[0]], key[1])
            stack.pop()
        return self.memo[root]

    def _terminal(self, vid: str, m: Map) -> str | None:
        """A value the walk does not compute from operands (anchor, uniform, buffer), else None."""
        special = self.anchor(vid, m)
        if special is not None:
            return special
        if vid in self.uniforms:
            return self.uniforms[vid]
        if vid not in self.ops:
            return self.leaf(vid, m)
        return None

    def _render(self, vid: str, m: Map) -> str:
        ready = self._terminal(vid, m)
        return ready if ready is not None else self._compute(self.ops[vid], m)

    def _compute(self, op: ir.Op, m: Map) -> str:
        """``op`` at ``m`` from its operands (already rendered when called from :meth:`value`)."""
        expr = self.expression(op, m)
        if rounds(op):
            return self._bind(op, self.lang.round(expr, self.dtype(op.out)))
        if op.op in ("transpose", "copy", "lit"):
            return expr
        return self._bind(op, expr)

    def _bind(self, op: ir.Op, expr: str) -> str:
        name = self.fresh()
        self.emit(f"const {self.lang.ctype(self.dtype(op.out))} {name} = {expr};")
        return name

    def args(self, op: ir.Op, m: Map) -> list[str]:
        return [self.value(a, operand_map(op, m, k, self.types[a].shape, self.row_axis))
                for k, a in enumerate(op.args)]

    def expression(self, op: ir.Op, m: Map) -> str:
        lang = self.lang
        if op.op == "lit":
            return lang.literal(op.attr("value"), self.dtype(op.out))
        args = self.args(op, m)
        if op.op == "transpose":
            return args[0]
        if op.op == "cast":
            return lang.cast(args[0], self.dtype(op.args[0]), self.dtype(op.out))
        if op.op == "where":
            return lang.apply("where", self.dtype(op.out), c=args[0], a=args[1], b=args[2])
        operand = self.dtype(op.args[0])
        if len(args) == 1:
            return lang.apply(op.op, operand, x=args[0])
        return lang.apply(op.op, operand, a=args[0], b=args[1])
