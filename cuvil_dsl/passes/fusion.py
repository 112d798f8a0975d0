"""The fusion planner: a checked pipeline to a :class:`FusionPlan` (which ops share a kernel).

Needs a pipeline the checker accepted. Guarantees: every tensor op lands in exactly one
kernel (a ``.T`` that is only read is a view and is copied into each kernel that reads it);
scalar-only work is on the host; a ``kernel`` block is exactly one kernel or an E401 at the
statement that breaks it; no kernel spans a graph boundary or a host statement; values live
in memory only when a later kernel, a host statement or the caller reads them.

Policy, outside kernel blocks, in source order within a segment (the stretch between graph
boundaries and host statements): an op joins the latest kernel it fits, or an earlier one
when all its inputs are ready there; elementwise work fuses into elementwise chains and as
prologue or epilogue into reductions and row ops (same rows), into a GEMM as epilogue (when it
reads the GEMM's result), and a row softmax over a GEMM's last axis shares the GEMM's kernel.
A second `@` that multiplies such an unnamed softmax by a tensor from memory joins them too
(``attention``: ``softmax(q @ k.T * c) @ v`` in one kernel, the probabilities never stored; see
:meth:`_Planner._attention_misfit` for when).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cuvil_dsl.diagnostics import SOURCES, Diagnostic, Span, error
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes import configs
from cuvil_dsl.passes.indexing import (REDUCE_OPS, ROW_OPS, Layout, Misfit, attention_layout, broadcast_shapes,
                                       derive_layout, kernel_layout, shape_of)
from cuvil_dsl.passes.plan import Buffer, FusedKernel, FusionPlan, GraphStep, HostStep, Launch, Step
from cuvil_dsl.passes.uniform import split_uniform
from cuvil_dsl.types import DType, Shape, TensorType


# Most reductions and row ops one kernel holds. A row kernel makes one pass over its rows per
# row statistic and recomputes the work before it in each pass, so its source grows with the
# square of this count (200 chained softmaxes rendered 10 MB of CUDA C); one per kernel is all
# LANGUAGE.md promises, the rest is an optimisation.
MAX_ROW_OPS = 16


@dataclass(eq=False)
class _Group:
    """A kernel being built: its ops, its iteration space and where it came from.

    Groups compare by identity (``eq=False``): the planner asks "is this the same kernel"
    (``in``, ``index``, ``remove``), and comparing field by field made every such question cost
    the size of the kernels' op lists (quadratic planning on large pipelines), besides
    confusing two different empty groups. ``layout`` caches the layout of ``ops`` over
    ``domain``/``row_axis`` as of the last join (``layout_len`` ops); it is rederived when the
    ops were changed in any other way (temporaries sunk into another kernel).
    """

    kind: str | None
    domain: Shape
    row_axis: int | None
    anchor: str | None
    graph: str | None
    block: ir.Block | None
    ops: list[ir.Op] = field(default_factory=list)
    name: str = ""
    layout: Layout | None = None
    layout_len: int = -1
    row_ops: int = 0  # reductions and row ops among ``ops`` (see MAX_ROW_OPS)

    @property
    def members(self) -> set[str]:
        return {op.out for op in self.ops}


@dataclass
class _Segment:
    graph: ir.Block | None
    items: list  # ir.Op | ir.Block (kernel blocks)


class _Planner:
    def __init__(self, pipeline: ir.Pipeline, arch: str):
        self.p = pipeline
        self.arch = arch
        self.host_ops, self.uniform = split_uniform(pipeline)
        self.types = pipeline.value_types()
        self.results = {r.name for r in pipeline.results}
        self.host_reads = {s.arg for s, _g, _k in ir.walk(pipeline.body) if isinstance(s, ir.HostStmt) and s.arg}
        self.views = {
            op.out: op for op in pipeline.ops()
            if op.op == "transpose" and op.out not in self.results and op.out not in self.host_reads
        }
        self._frozen_views = frozenset(self.views)
        self.readers: dict[str, list[ir.Op]] = {}  # value -> the ops that read it, anywhere in the pipeline
        for op in pipeline.ops():
            for a in dict.fromkeys(op.args):
                self.readers.setdefault(a, []).append(op)
        self.owner: dict[str, _Group] = {}
        self.groups: list[_Group] = []
        self.diags: list[Diagnostic] = []
        self.notes: list[str] = []

    # ------------------------------------------------------------------ transitions
    def _view_chain(self, g: _Group, op: ir.Op) -> list[ir.Op]:
        """The views ``op`` reads that ``g`` does not hold yet, innermost first."""
        pulled: list[ir.Op] = []
        members = g.members

        def pull(value: str) -> None:
            view = self.views.get(value)
            if view is None or value in members or view in pulled:
                return
            pull(view.args[0])
            pulled.append(view)

        for a in op.args:
            pull(a)
        return pulled

    def _sources(self, value: str) -> str:
        """A value with the views in front of it peeled off."""
        while value in self.views:
            value = self.views[value].args[0]
        return value

    def _transition(self, g: _Group, op: ir.Op, anchored: frozenset) -> tuple | str:
        """The group's (kind, domain, row_axis, anchor) with ``op`` in it, or why it cannot be."""
        kind = g.kind
        if kind == "attention":
            return "work after `softmax(...) @ v` runs in another kernel (the attention kernel stores its product as it is)"
        if op.op == "matmul":
            if kind is None:
                return ("matmul", shape_of(op), None, op.out)
            if kind == "matmul_softmax":
                why = self._attention_misfit(g, op)
                return ("attention", g.domain, g.row_axis, g.anchor) if why is None else why
            if kind == "matmul":
                return "a second `@` in one kernel"
            operands = {self._sources(a) for a in op.args}
            if kind in ("reduce", "row"):
                if operands & anchored:
                    return "a reduction or row operation feeding `@`"
                return "`@` after a reduction or row operation cannot share its kernel"
            if operands & g.members:
                return ("elementwise work feeding `@` (the operands of `@` are read from memory: parameters "
                        "or values of earlier kernels)")
            return ("matmul", shape_of(op), None, op.out)
        if op.op in REDUCE_OPS or op.op in ROW_OPS:
            x_shape = self.types[op.args[0]].shape
            axis = op.attr("axis", len(x_shape) - 1)
            new_kind = "reduce" if op.op in REDUCE_OPS else "row"
            if kind in (None, "elementwise"):
                return (new_kind, x_shape, axis, op.out)
            if kind in ("reduce", "row"):
                if g.row_ops >= MAX_ROW_OPS:
                    return f"more than {MAX_ROW_OPS} reductions or row operations in one kernel"
                return ("row" if "row" in (kind, new_kind) else "reduce", g.domain, g.row_axis, g.anchor)
            if kind == "matmul":
                if op.op in ("softmax", "log_softmax") and axis == len(x_shape) - 1 and op.args[0] in anchored:
                    return ("matmul_softmax", g.domain, len(g.domain) - 1, g.anchor)
                return "a reduction or row operation after `@` (only a row softmax over the last axis shares the GEMM's kernel)"
            return "a second row operation after `@` and its softmax"
        if kind is None:
            return ("elementwise", shape_of(op), None, None)
        if kind == "elementwise":
            # a transposed result may still fit the current space (stored through its map)
            return (kind, broadcast_shapes(g.domain, shape_of(op)) or g.domain, None, None)
        return (kind, g.domain, g.row_axis, g.anchor)

    def _attention_misfit(self, g: _Group, op: ir.Op) -> str | None:
        """Why the second `@` ``op`` cannot join ``g`` (a GEMM and its row softmax) as an attention
        kernel, or None when it can: ``op`` multiplies the group's softmax (its last op, unnamed, read by
        nothing else, as is every value of the group) by a 16-bit tensor read from memory as it is
        stored (no ``.T``), and the first GEMM's left operand is not a view either."""
        softmax = g.ops[-1]
        if softmax.op != "softmax" or op.args[0] != softmax.out:
            return "a second `@` joins a GEMM's kernel only as `softmax(...) @ v`, the row softmax its left operand"
        if softmax.named or softmax.out in self.results or softmax.out in self.host_reads:
            return ("the softmax is bound to a name, so its values are rounded as a whole, which the attention "
                    "kernel never forms (write `softmax(...) @ v` to fuse them)")
        for member in g.ops:
            others = [r for r in self.readers.get(member.out, ()) if r is not op and r not in g.ops]
            if others or member.out in self.results or member.out in self.host_reads:
                return f"`{member.out}` is read outside `softmax(...) @ v`, so it is kept in memory"
        v = op.args[1]
        if v in self.views or v in g.members:
            return "the right operand of `softmax(...) @ v` is read from memory as it is stored (no `.T`)"
        first = next(o for o in g.ops if o.out == g.anchor)
        if first.args[0] in self.views:
            return "the attention kernel reads the first `@`'s left operand as it is stored (no `.T`)"
        if tuple(shape_of(op)[:-1]) != tuple(g.domain[:-1]):
            return "`v` adds batch axes the softmax does not have"
        depth = self.types[first.args[0]].shape[-1]
        if isinstance(depth, int) and depth > configs.ATTENTION_MAX_DEPTH:
            return f"the attention kernel holds head dimensions up to {configs.ATTENTION_MAX_DEPTH}, not {depth}"
        if self.types[v].dtype not in (DType.F16, DType.BF16) or not configs.uses_tensor_cores(
                self.types[v].dtype, self.arch, False):
            return "the attention kernel runs 16-bit operands on tensor cores"
        return None

    def _fit(self, g: _Group, op: ir.Op) -> tuple[tuple, list[ir.Op], Layout] | str:
        """Try ``op`` (and the views it reads) in ``g``: the new state and layout, or a reason."""
        pulled = self._view_chain(g, op)
        views = self._frozen_views
        current = self._layout(g) if g.ops else None
        anchored = current.anchored if isinstance(current, Layout) else frozenset()
        state = self._transition(g, op, anchored)
        if isinstance(state, str):
            return state
        if state[0] == "attention":  # the product lives over its own space (see indexing.attention_layout)
            assert isinstance(current, Layout) and not pulled, (current, pulled)
            return state, pulled, attention_layout(current, op)
        _kind, domain, row_axis, _anchor = state
        if isinstance(current, Layout) and tuple(domain) == tuple(current.domain) and row_axis == current.row_axis:
            layout = derive_layout(tuple(pulled + [op]), domain, row_axis, self.types, views, start=current)
        else:
            layout = derive_layout(tuple(g.ops + pulled + [op]), domain, row_axis, self.types, views)
        if isinstance(layout, Misfit):
            return layout.reason
        return state, pulled, layout

    def _layout(self, g: _Group) -> Layout | Misfit:
        """The layout of ``g``'s ops over its space: the one cached at the last join, if still current."""
        if g.layout is None or g.layout_len != len(g.ops):
            g.layout = kernel_layout(g.kind, tuple(g.ops), g.domain, g.row_axis, self.types, self._frozen_views)
            g.layout_len = len(g.ops)
        return g.layout

    def _join(self, g: _Group, op: ir.Op, fit: tuple) -> None:
        state, pulled, layout = fit
        g.kind, g.domain, g.row_axis, g.anchor = state
        g.ops.extend(pulled)
        g.ops.append(op)
        g.layout, g.layout_len = layout, len(g.ops)
        g.row_ops += op.op in REDUCE_OPS or op.op in ROW_OPS
        self.owner[op.out] = g

    # ------------------------------------------------------------------ policy
    def _policy_allows(self, g: _Group, op: ir.Op, fit: tuple) -> str | None:
        state, _pulled, layout = fit
        if op.op == "matmul" and g.ops and state[0] != "attention":
            return "`@` starts its own kernel"
        if g.kind in ("matmul", "matmul_softmax") and op.out not in layout.anchored:
            return "it does not read the GEMM's result"
        if (op.op in REDUCE_OPS or op.op in ROW_OPS) and tuple(self.types[op.args[0]].shape) != tuple(g.domain):
            return "its rows are not this kernel's iteration space"
        return None

    def _earliest_ready(self, op: ir.Op, open_groups: list[_Group]) -> int:
        """The first position in ``open_groups`` at which every input of ``op`` is computed
        before (or inside) the group there: the position of the latest group producing one.

        Computed once per op (a group-by-group search made planning cubic in the kernel count).
        """
        position = {id(g): i for i, g in enumerate(open_groups)}
        return max((position.get(id(self.owner.get(self._sources(a))), -1) for a in op.args), default=-1)

    def _candidates(self, op: ir.Op, open_groups: list[_Group]) -> list[_Group]:
        """Open groups to try, latest first, those that compute an input of ``op`` before the
        others (fusing there keeps the input in registers)."""
        producers = {id(self.owner.get(self._sources(a))) for a in op.args}
        ordered = list(reversed(open_groups))
        return [g for g in ordered if id(g) in producers] + [g for g in ordered if id(g) not in producers]

    def _place(self, op: ir.Op, open_groups: list[_Group], graph: str | None) -> None:
        first_reason = None
        earliest = self._earliest_ready(op, open_groups)
        ready = {id(g) for g in open_groups[max(earliest, 0):]}
        for g in self._candidates(op, open_groups):
            if g.block is not None or id(g) not in ready:
                continue
            fit = self._fit(g, op)
            reason = fit if isinstance(fit, str) else self._policy_allows(g, op, fit)
            if reason is None:
                self._join(g, op, fit)
                return
            first_reason = first_reason or reason
        g = _Group(None, (), None, None, graph, None)
        fit = self._fit(g, op)
        assert not isinstance(fit, str), fit
        self._join(g, op, fit)
        open_groups.append(g)
        self.groups.append(g)
        if first_reason and any(x.block is None for x in open_groups[:-1]):
            self.notes.append(f"`{op.out}` starts a new kernel: {first_reason}")

    def _kernel_block(self, block: ir.Block, open_groups: list[_Group], graph: str | None) -> None:
        g = _Group(None, (), None, None, graph, block, name=block.name)
        open_groups.append(g)
        self.groups.append(g)
        block_ops = [s for s, _g, _k in ir.walk(block.body) if isinstance(s, ir.Op)]
        work = [op for op in block_ops if op.out not in self.uniform and op.out not in self.views]
        for i, op in enumerate(work):
            fit = self._fit(g, op)
            if isinstance(fit, str):
                self.diags.append(error(
                    "E401", f"kernel block `{block.name}` cannot be one kernel: {fit}",
                    _statement_span(op, block_ops),
                    "split the block, or move this statement out of it and let the planner place it"))
                for rest in work[i:]:  # still plan every op, so the plan stays complete
                    self._place(rest, open_groups, graph)
                break
            self._join(g, op, fit)
        if not g.ops:
            open_groups.remove(g)
            self.groups.remove(g)

    # ------------------------------------------------------------------ whole pipeline
    def run(self, overrides: dict | None) -> tuple[FusionPlan, list[Diagnostic]]:
        raw_steps: list = []
        for seg in _segments(self.p.body):
            if isinstance(seg, ir.HostStmt):
                raw_steps.append(seg)
                continue
            graph = seg.graph.name if seg.graph else None
            open_groups: list[_Group] = []
            for item in seg.items:
                if isinstance(item, ir.Block):
                    self._kernel_block(item, open_groups, graph)
                elif item.out not in self.uniform and item.out not in self.views:
                    self._place(item, open_groups, graph)
            self._sink_temporaries(open_groups)
            raw_steps.append((seg, open_groups))
        buffers = self._buffers()
        live = {b.name for b in buffers}
        self._name_groups()
        kernels = {id(g): self._kernel(g, live, overrides or {}) for g in self.groups}
        steps: list[Step] = []
        for item in raw_steps:
            if isinstance(item, ir.HostStmt):
                steps.append(HostStep(item))
                continue
            seg, groups = item
            launches = tuple(Launch(kernels[id(g)]) for g in groups if g in self.groups)
            if seg.graph is not None:
                steps.append(GraphStep(seg.graph.name, launches, seg.graph.span))
            else:
                steps.extend(launches)
        plan = FusionPlan(self.p, self.host_ops, tuple(steps), buffers, tuple(self.notes))
        return plan, self.diags

    def _sink_temporaries(self, groups: list[_Group]) -> None:
        """Move an elementwise result into the one later kernel that reads it when that costs no
        extra memory traffic, or when the reader can read the named value it came from instead
        (a temporary is not rounded to its dtype, a named value is, so memory should hold the
        named one). The reader may be a kernel block (it stays one kernel, now also computing the
        value) or an attention kernel: a mask ``kpos <= qpos`` is then compared per element from the
        positions instead of an [M, N] buffer written by a kernel of its own and read back."""
        moved = True
        while moved:
            moved = False
            for a in [g for g in groups if g.block is None]:
                for op in reversed(a.ops):
                    found = self._sink_target(op, a, groups)
                    if found is not None:
                        target, cone = found
                        for o in cone:
                            a.ops.remove(o)
                            self.owner[o.out] = target
                        a.layout = target.layout = None  # both kernels' ops changed
                        i = self._first_reader(target, op.out)
                        target.ops[:] = target.ops[:i] + cone + target.ops[i:]
                        moved = True
                        break
            for g in [g for g in groups if not g.ops]:
                groups.remove(g)
                self.groups.remove(g)

    def _first_reader(self, g: _Group, value: str) -> int:
        return next(i for i, o in enumerate(g.ops) if value in o.args)

    def _sink_target(self, op: ir.Op, a: _Group, groups: list[_Group]) -> tuple[_Group, list[ir.Op]] | None:
        """The kernel to move ``op`` into, with the ops of ``a`` that move along (``op`` last, in ``a``'s order), or
        None. Those are ``op`` alone, or ``op`` with the unnamed elementwise values of ``a`` it is computed from that
        nothing else reads (a mask ``kpos > qpos - 64`` moves whole: ``qpos - 64`` is read by the comparison alone)."""
        if (op.op not in ir.ELEMENTWISE_OPS or op.out in self.results or op.out in self.host_reads
                or any(op.out in o.args for o in a.ops)):
            return None
        readers = [g for g in groups if g is not a and any(op.out in o.args for o in g.ops)]
        if len(readers) != 1 or groups.index(readers[0]) < groups.index(a):
            return None
        fresh = [x for x in op.args if x in a.members and not self._stored(x, a, op)]
        cone = [op]
        # moving must not add memory traffic (no new buffer), except that an unnamed value may
        # trade places with the named value it is computed from
        if fresh and (op.named or len(fresh) > 1 or not _is_named(self.p, fresh[0])):
            cone = self._sink_cone(op, a)
            if cone is None:
                return None
        b = readers[0]
        if any(o.op == "matmul" and op.out in {self._sources(x) for x in o.args} for o in b.ops):
            return None  # the operands of `@` are read from memory (see _transition): it stays stored
        i = self._first_reader(b, op.out)
        ops = tuple(b.ops[:i] + cone + b.ops[i:])
        layout = kernel_layout(b.kind, ops, b.domain, b.row_axis, self.types, frozenset(self.views))
        return None if isinstance(layout, Misfit) else (b, cone)

    def _sink_cone(self, op: ir.Op, a: _Group) -> list[ir.Op] | None:
        """``op`` (unnamed) and the unnamed elementwise ops of ``a`` whose values only ``op`` and the rest of them read,
        none of them in memory anyway, which ``op`` is computed from; None unless every other value they read is in
        memory anyway (so moving them all adds no buffer)."""
        if op.named:
            return None
        cone, todo = {op.out: op}, [op]
        while todo:
            for x in todo.pop().args:
                if x in cone or x not in a.members or self._stored(x, a, op):
                    continue  # from memory (an input, another kernel's, or this one's stored anyway)
                src = next((o for o in a.ops if o.out == x), None)
                if (src is None or src.named or src.op not in ir.ELEMENTWISE_OPS
                        or x in self.results or x in self.host_reads):
                    return None
                cone[x] = src
                todo.append(src)
        if any(x in cone for o in a.ops if o.out not in cone for x in o.args):
            return None  # a value of the cone read by an op that stays
        return [o for o in a.ops if o.out in cone]

    def _stored(self, value: str, owner: _Group, reader: ir.Op) -> bool:
        """Is ``value`` in memory anyway (a result, printed, or read by another kernel)?"""
        if value in self.results or value in self.host_reads:
            return True
        return any(value in o.args for g in self.groups if g is not owner for o in g.ops if o is not reader)

    def _external_reads(self, g: _Group) -> list[str]:
        members = g.members
        seen: list[str] = []
        for op in g.ops:
            for a in op.args:
                if a not in members and a not in self.uniform and a not in seen:
                    seen.append(a)
        return seen

    def _buffers(self) -> tuple[Buffer, ...]:
        """Values kept in memory; kernels whose work nobody reads are dropped (W602 said so)."""
        while True:
            read_elsewhere = {a for g in self.groups for a in self._external_reads(g)}
            needed = read_elsewhere | self.results | self.host_reads
            live = [g for g in self.groups if g.members & needed]
            if len(live) == len(self.groups):
                break
            self.groups = live
        out = [Buffer(p.name, p.type, "input") for p in self.p.tensor_params]
        for op in self.p.ops():
            if op.out in needed and self.owner.get(op.out) in self.groups:
                out.append(Buffer(op.out, op.type, "result" if op.out in self.results else "intermediate"))
        return tuple(out)

    def _name_groups(self) -> None:
        taken = {g.block.name for g in self.groups if g.block is not None}
        counters: dict[str, int] = {}
        for g in self.groups:
            if g.block is not None:
                continue
            prefix = g.graph or "main"
            n = counters.get(prefix, 0) + 1
            while f"{prefix}_k{n}" in taken:
                n += 1
            counters[prefix] = n
            g.name = f"{prefix}_k{n}"

    def _kernel(self, g: _Group, live: set[str], overrides: dict) -> FusedKernel:
        dtype = next(op.type.dtype for op in g.ops if op.out == g.anchor) if g.anchor else _dtype_of(g.ops[-1])
        span = g.block.span if g.block is not None else g.ops[0].span
        config = configs.default_config(g.kind, dtype, self.arch)
        if g.name in overrides:
            config, diags = configs.apply_overrides(config, overrides[g.name], g.kind, dtype, g.name, span,
                                                    self.arch)
            self.diags.extend(diags)
        outputs = tuple(op.out for op in g.ops if op.out in live and self.owner.get(op.out) is g)
        uniforms = tuple(dict.fromkeys(a for op in g.ops for a in op.args if a in self.uniform))
        return FusedKernel(
            name=g.name, kind=g.kind, ops=tuple(g.ops), inputs=tuple(self._external_reads(g)), outputs=outputs,
            uniforms=uniforms, anchor=g.anchor, config=config, graph=g.graph,
            block_name=g.block.name if g.block is not None else None, span=span,
            domain=tuple(g.domain), row_axis=g.row_axis,
        )


def _is_named(pipeline: ir.Pipeline, value: str) -> bool:
    return any(op.out == value and op.named for op in pipeline.ops())


def _dtype_of(op: ir.Op):
    assert isinstance(op.type, TensorType)
    return op.type.dtype


def _segments(body: tuple[ir.Stmt, ...]) -> list:
    """Split the body at graph boundaries and host statements; kernel blocks stay items."""
    out: list = []
    current = _Segment(None, [])
    for stmt in body:
        if isinstance(stmt, ir.HostStmt):
            out.append(current)
            out.append(stmt)
            current = _Segment(None, [])
        elif isinstance(stmt, ir.Block) and stmt.kind == "graph":
            out.append(current)
            out.append(_Segment(stmt, list(stmt.body)))
            current = _Segment(None, [])
        else:
            current.items.append(stmt)
    out.append(current)
    return [s for s in out if isinstance(s, ir.HostStmt) or s.items or s.graph is not None]


def _statement_span(op: ir.Op, block_ops: list[ir.Op]) -> Span:
    """The assignment target of the statement holding ``op``.

    The IR keeps operator spans only, so find the statement's bound name (the first named op
    from ``op`` on) and look for ``name =`` at a statement start before the statement's first
    op in the source text; fall back to the op's own span.
    """
    i = block_ops.index(op)
    named = next((o for o in block_ops[i:] if o.named), op)
    start = i
    while start > 0 and not block_ops[start - 1].named:
        start -= 1
    first = min((o.span for o in block_ops[start:block_ops.index(named) + 1]), default=op.span)
    pattern = re.compile(r"(?:^|[;{])\s*(" + re.escape(named.out) + r")\s*=(?!=)")
    for line in range(first.line, max(first.line - 20, 0), -1):
        text = SOURCES.line(first.file, line)
        if text is None:
            break
        limit = first.column - 1 if line == first.line else len(text)
        hits = [m for m in pattern.finditer(text[:limit])]
        if hits:
            col = hits[-1].start(1) + 1
            return Span(first.file, line, col, line, col + len(named.out))
    return op.span


# The architecture a target without one (the CPU and reference backends) is planned for: the CPU backend runs the
# same plan as the GPU it stands in for.
PLAN_ARCH = "sm_90"


def plan_pipeline(pipeline: ir.Pipeline, overrides: dict | None = None, arch: str | None = PLAN_ARCH
                  ) -> tuple[FusionPlan, list[Diagnostic]]:
    """Plan ``pipeline``'s kernels. ``overrides`` is the spec's ``kernels:`` section (kernel
    name to a dict or settings model with block, tile, launch_bounds, max_registers); names
    that match no kernel are left to the spec's own check (E501 at the YAML key). ``arch``
    None (a CPU or reference target, which has none) plans as for :data:`PLAN_ARCH`.

    >>> from cuvil_dsl.frontend import check_source
    >>> p = check_source("pipeline f(x: f32[N]) -> y: f32[N] { y = exp(x) * 2 }").module.pipelines[0]
    >>> [k.name for k in plan_pipeline(p)[0].kernels]
    ['main_k1']
    """
    return _Planner(pipeline, arch or PLAN_ARCH).run(overrides)
