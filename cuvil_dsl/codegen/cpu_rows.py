"""Row kernels on the CPU: reductions, softmax, log_softmax, layernorm and rmsnorm with fused
prologues and epilogues, along any axis.

A ``prange`` runs over the domain's *lines*: every position of the axes other than the row
axis. Each line runs its phases (see :mod:`~cuvil_dsl.codegen.program`) in order, each a loop
along the row that accumulates the phase's reductions in the compute type (f32 for half
types, f64 for f64, wrapping i32), then the final loop that stores. With the kernel's
``reassoc`` flag LLVM vectorizes these loops, sums and NaN-propagating maxima included.

Values that do not vary along the row (row statistics, ``1 / sqrt(var + eps)``, operands
broadcast along the row) are computed once per line, before the loop that first needs them,
by a walk of their own; results that do not vary along the row are stored after the loops.
"""

from __future__ import annotations

from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cpu import CpuKernel, indent, prod
from cuvil_dsl.codegen.program import Reduction
from cuvil_dsl.passes.indexing import Map, operand_map


LANES = 8  # partial accumulators per reduction: one AVX2 vector of f32


class _RowKernel:
    def __init__(self, k: CpuKernel):
        p = k.p
        self.k, self.p = k, p
        self.a = p.row_axis
        self.L = p.domain[self.a]
        self.acc_names = {r.op.out: str(i) for i, r in enumerate(p.reductions)}
        self.acc: dict[str, str] = {}  # reduction out -> the variable holding the line's result
        self.passes = [[r for r in p.reductions if r.phase == i] for i in range(p.phases)]
        self.row_lines: list[str] = []
        self.row_walk = k.walk(self.row_lines.append, self.row_coord, None, lambda v, m: self.acc.get(v))

    def row_coord(self, d: int) -> str:
        assert d != self.a, "a per-line value depends on the position in the row"
        return f"c{d}"

    @staticmethod
    def coord(d: int) -> str:
        return f"c{d}"

    def anchor(self, value: str, m: Map) -> str | None:
        if value in self.acc:
            return self.acc[value]
        return self.row_walk.value(value, m) if self.a not in m else None

    def input_map(self, r: Reduction) -> Map:
        op = r.op
        return operand_map(op, self.p.layout.maps[op.out], 0, self.p.types[op.args[0]].shape, self.a)

    def hoisted(self, loop: list[str]) -> list[str]:
        """The per-line values the loop just asked for, then the loop."""
        row, self.row_lines[:] = list(self.row_lines), []
        return row + loop

    def along_row(self, lines: list[str]) -> list[str]:
        return [f"for c{self.a} in range({self.L}):", *indent(lines)]

    def phase(self, index: int) -> list[str]:
        """Accumulate the phase's reductions along the row, then bind their results.

        Element ``c`` of the row goes to partial ``c % LANES``; the partials are combined in a
        fixed order at the end. The inner loop over the lanes has no loop-carried dependency,
        so LLVM vectorizes it without reassociating anything: the summation order is the
        source's, whichever way (and however often) LLVM optimizes the function.
        """
        k = self.k
        reds = self.passes[index]
        partials = {r.op.out: f"part{self.acc_names[r.op.out]}" for r in reds}
        lines = [f"{partials[r.op.out]} = np.full({LANES}, {k.lang.identity(r.op.op, k.dtype(r.op.out))})"
                 for r in reds]
        whole = self.L - self.L % LANES
        loops: list[str] = []
        if whole:
            body = [f"c{self.a} = c{self.a}_ + e", *self.accumulate(reds, partials, "e")]
            loops += [f"for c{self.a}_ in range(0, {whole}, {LANES}):", f"    for e in range({LANES}):",
                      *indent(body, 2)]
        if whole < self.L:
            loops += [f"for c{self.a} in range({whole}, {self.L}):",
                      *indent(self.accumulate(reds, partials, f"c{self.a} - {whole}"))]
        lines += self.hoisted(loops)
        for r in reds:
            name, part, dtype = f"r{self.acc_names[r.op.out]}", partials[r.op.out], k.dtype(r.op.out)
            lines += [f"{name} = {part}[0]", f"for e in range(1, {LANES}):",
                      f"    {name} = {k.lang.apply(k.lang.combine[r.op.op], dtype, a=name, b=f'{part}[e]')}"]
            if rounds(r.op):
                lines.append(f"{name} = {k.lang.round(name, dtype)}")
            self.acc[r.op.out] = name
        return lines

    def accumulate(self, reds: list[Reduction], partials: dict[str, str], lane: str) -> list[str]:
        """One element's work: the reductions' inputs, each combined into its partial ``lane``."""
        k = self.k
        body: list[str] = []
        w = k.walk(body.append, self.coord, None, self.anchor)
        for r in reds:
            x = w.value(r.op.args[0], self.input_map(r))
            slot = f"{partials[r.op.out]}[{lane}]"
            body.append(f"{slot} = {k.lang.apply(k.lang.combine[r.op.op], k.dtype(r.op.out), a=slot, b=x)}")
        return body

    def final(self) -> list[str]:
        """Stores: values varying along the row in one last loop, per-line values after it."""
        k = self.k
        varying = [s for s in self.p.stores if self.a in s.map]
        lines: list[str] = []
        if varying:
            body: list[str] = []
            w = k.walk(body.append, self.coord, None, self.anchor)
            for s in varying:
                body += k.store_lines(s, w.value(s.value, s.map), self.coord)
            lines += self.hoisted(self.along_row(body))
        for s in self.p.stores:
            if self.a not in s.map:
                value = self.row_walk.value(s.value, s.map)
                lines += self.hoisted(k.store_lines(s, value, self.row_coord, skip=(self.a,)))
        return lines

    def render(self, entry: str) -> list[str]:
        k, p = self.k, self.p
        others = [d for d in range(len(p.domain)) if d != self.a]
        line = k.coords("q", others)
        for i in range(p.phases):
            line += self.phase(i)
        line += self.final()
        lines = prod(p.domain[d] for d in others)
        return k.jit_function(entry, [f"for q in numba.prange({lines}):", *indent(line)])


def render(k: CpuKernel, entry: str) -> list[str]:
    return _RowKernel(k).render(entry)
