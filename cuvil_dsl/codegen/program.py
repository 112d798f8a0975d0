"""A fused kernel made concrete for rendering: sizes bound, row ops expanded, work phased.

Every backend renders a :class:`KernelProgram`. Row ops become primitive row reductions
(``rsum rmax rmin``) and elementwise ops, so a row kernel is a sequence of *phases* (each ends
with the cross-thread reductions whose inputs are ready) and a final pass that stores:

    softmax(x)     m = rmax(x); e = exp(x - m); s = rsum(e); y = e / s
    log_softmax(x) m = rmax(x); d = x - m; s = rsum(exp(d)); y = d - log(s)
    layernorm      mu = rsum(x) / L; d = x - mu; var = rsum(d * d) / L; y = d * (1 / sqrt(var + eps)) [* w] [+ b]
    rmsnorm        ms = rsum(x * x) / L; y = x * (1 / sqrt(ms + eps)) [* w]
    mean(x)        rsum(x) / L

Intermediate statistics stay in the compute type (f32 for f16/bf16, two-pass variance); the
op's own result keeps the op's id, so it is rounded exactly when the op was a named binding.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.indexing import ROW_REDUCTIONS, Layout, Map, kernel_layout
from cuvil_dsl.passes.plan import FusedKernel, FusionPlan
from cuvil_dsl.types import TensorType, concrete_shape

_REDUCTION = {"sum": "rsum", "mean": "rsum", "max": "rmax", "min": "rmin"}


@dataclass(frozen=True)
class Store:
    value: str  # a buffer the kernel writes
    map: Map  # where it sits over the domain (axes it lacks are stored at coordinate 0)


@dataclass(frozen=True)
class Reduction:
    op: ir.Op  # an rsum / rmax / rmin op
    phase: int  # 0 for reductions of loaded data, 1 + the latest phase it depends on otherwise


@dataclass(frozen=True)
class KernelProgram:
    kernel: FusedKernel
    sizes: dict
    domain: tuple[int, ...]
    row_axis: int | None
    ops: dict  # value id -> ir.Op, in order (row ops expanded)
    types: dict  # value id -> Type, internal values included
    layout: Layout
    stores: tuple[Store, ...]
    reductions: tuple[Reduction, ...]
    buffers: tuple[str, ...]  # inputs then outputs: the kernel's buffer parameters
    uniforms: tuple[str, ...]

    def shape(self, value: str) -> tuple[int, ...]:
        t = self.types[value]
        return concrete_shape(t.shape, self.sizes) if isinstance(t, TensorType) else ()

    def strides(self, value: str) -> tuple[int, ...]:
        """Row-major element strides of a buffer."""
        out, acc = [], 1
        for d in reversed(self.shape(value)):
            out.append(acc)
            acc *= d
        return tuple(reversed(out))

    def size(self, value: str) -> int:
        n = 1
        for d in self.shape(value):
            n *= d
        return n

    @property
    def phases(self) -> int:
        return 1 + max((r.phase for r in self.reductions), default=-1)


class _Expander:
    def __init__(self, types: dict, sizes: dict):
        self.types = dict(types)
        self.sizes = sizes
        self.ops: list[ir.Op] = []
        self.seen: dict[tuple, str] = {}  # identical internal ops are computed once

    def add(self, base: ir.Op, name: str, opcode: str, args: tuple, shape, **attrs) -> str:
        dtype = self.types[base.args[0]].dtype
        t = TensorType(dtype, tuple(shape))
        key = (opcode, args, tuple(attrs.items()), t)
        if key not in self.seen:
            out = self.seen[key] = f"{base.out}.{name}"
            self.ops.append(ir.Op(opcode, out, t, args, base.span, tuple(attrs.items())))
            self.types[out] = t
        return self.seen[key]

    def final(self, base: ir.Op, opcode: str, args: tuple) -> None:
        self.ops.append(ir.Op(opcode, base.out, base.type, args, base.span, (), base.named))

    def lit(self, base: ir.Op, name: str, value: float) -> str:
        return self.add(base, name, "lit", (), (), value=value)

    def expand(self, op: ir.Op) -> None:
        if op.op in _REDUCTION:
            if op.op != "mean":
                self.ops.append(ir.Op(_REDUCTION[op.op], op.out, op.type, op.args, op.span, op.attrs, op.named))
                return
            x_shape = self.types[op.args[0]].shape
            total = self.add(op, "sum", "rsum", op.args, op.type.shape, **dict(op.attrs))
            n = concrete_shape((x_shape[op.attr("axis")],), self.sizes)[0]
            self.final(op, "div", (total, self.lit(op, "n", float(n))))
            return
        if op.op not in ir.ROW_OPS:
            self.ops.append(op)
            return
        x = op.args[0]
        shape = self.types[x].shape
        axis = op.attr("axis", len(shape) - 1)
        kept = shape[:axis] + (1,) + shape[axis + 1:]
        stat = {"axis": axis, "keepdims": True}
        if op.op in ("softmax", "log_softmax"):
            m = self.add(op, "max", "rmax", (x,), kept, **stat)
            d = self.add(op, "shifted", "sub", (x, m), shape)
            e = self.add(op, "exp", "exp", (d,), shape)
            s = self.add(op, "sum", "rsum", (e,), kept, **stat)
            if op.op == "softmax":
                self.final(op, "div", (e, s))
            else:
                self.final(op, "sub", (d, self.add(op, "log", "log", (s,), kept)))
            return
        n = self.lit(op, "n", float(concrete_shape((shape[axis],), self.sizes)[0]))
        if op.op == "layernorm":
            mu = self.add(op, "mean", "div", (self.add(op, "sum", "rsum", (x,), kept, **stat), n), kept)
            centred = self.add(op, "centred", "sub", (x, mu), shape)
            sq = self.add(op, "sq", "mul", (centred, centred), shape)
            var = self.add(op, "var", "div", (self.add(op, "sqsum", "rsum", (sq,), kept, **stat), n), kept)
        else:
            centred = x
            sq = self.add(op, "sq", "mul", (x, x), shape)
            var = self.add(op, "ms", "div", (self.add(op, "sqsum", "rsum", (sq,), kept, **stat), n), kept)
        eps = self.lit(op, "eps", float(op.attr("eps")))
        root = self.add(op, "root", "sqrt", (self.add(op, "veps", "add", (var, eps), kept),), kept)
        inv = self.add(op, "inv", "div", (self.lit(op, "one", 1.0), root), kept)
        rest = op.args[1:]
        if not rest:
            self.final(op, "mul", (centred, inv))
            return
        y = self.add(op, "normed", "mul", (centred, inv), shape)
        if len(rest) == 1:
            self.final(op, "mul", (y, rest[0]))
            return
        self.final(op, "add", (self.add(op, "weighted", "mul", (y, rest[0]), shape), rest[1]))


def _phases(ops: dict) -> tuple[Reduction, ...]:
    memo: dict[str, frozenset] = {}

    def under(vid: str) -> frozenset:
        """The row reductions ``vid`` is computed from (stopping at the first on each path)."""
        if vid not in memo:
            op = ops.get(vid)
            if op is None:
                memo[vid] = frozenset()
            elif op.op in ROW_REDUCTIONS:
                memo[vid] = frozenset((vid,))
            else:
                memo[vid] = frozenset().union(*(under(a) for a in op.args)) if op.args else frozenset()
        return memo[vid]

    phase: dict[str, int] = {}
    out = []
    for op in ops.values():
        if op.op in ROW_REDUCTIONS:
            deps = under(op.args[0])
            phase[op.out] = 1 + max((phase[d] for d in deps), default=-1)
            out.append(Reduction(op, phase[op.out]))
    return tuple(out)


def build_program(plan: FusionPlan, kernel: FusedKernel, sizes: dict) -> KernelProgram:
    """Bind sizes, expand row ops (not a GEMM's softmax: its template keeps online statistics). An
    ``attention`` kernel's product is stored over its own space (:func:`~cuvil_dsl.passes.indexing.attention_layout`)."""
    types = plan.pipeline.value_types()
    ops = kernel.ops
    if kernel.kind in ("reduce", "row"):
        ex = _Expander(types, sizes)
        for op in ops:
            ex.expand(op)
        ops, types = tuple(ex.ops), ex.types
    views = frozenset(op.out for op in ops if op.op == "transpose" and op.out not in kernel.outputs)
    layout = kernel_layout(kernel.kind, ops, kernel.domain, kernel.row_axis, types, views)
    assert isinstance(layout, Layout), f"{kernel.name}: {layout}"
    by_id = {op.out: op for op in ops}
    return KernelProgram(
        kernel=kernel, sizes=dict(sizes), domain=concrete_shape(kernel.domain, sizes), row_axis=kernel.row_axis,
        ops=by_id, types=types, layout=layout,
        stores=tuple(Store(v, layout.maps[v]) for v in kernel.outputs),
        reductions=_phases(by_id), buffers=kernel.inputs + kernel.outputs, uniforms=kernel.uniforms,
    )
