"""Row kernels on the CPU: reductions, softmax, log_softmax, layernorm and rmsnorm with fused
prologues and epilogues, along any axis.

A ``prange`` runs over the domain's *lines*: every position of the axes other than the row
axis. Each line runs its phases (see :mod:`~cuvil_dsl.codegen.program`) in order, then a
final loop along the row that stores. A phase reduces in the compute type (f32 for half
types, f64 for f64, wrapping i32) in two steps that LLVM vectorizes without reassociating
anything, so results never depend on how (or how often) LLVM optimized the function:

1. *stage*: an elementwise loop evaluates the reductions' inputs into row arrays (skipped
   for an input that is a plain read of an f32/f64/i32/bool buffer or is staged already);
2. *reduce*: element ``c`` goes to partial ``c % LANES``; the loop over the lanes carries no
   dependency, and the partials are combined in a fixed order.

Staged rows are reused: a later phase or the final loop reads ``exp(x - max)`` from the row
array instead of computing it again. Values that do not vary along the row (row statistics,
``1 / sqrt(var + eps)``, operands broadcast along the row) are computed once per line,
before the loop that first needs them, by a walk of their own; results that do not vary
along the row are stored after the loops.
"""

from __future__ import annotations

from typing import Callable

from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cpu import CpuKernel, indent, prod
from cuvil_dsl.codegen.program import Reduction
from cuvil_dsl.passes.indexing import Map, operand_map
from cuvil_dsl.types import DType

LANES = 8  # partial accumulators per reduction: one AVX2 register of f32


class _RowKernel:
    def __init__(self, k: CpuKernel):
        p = k.p
        self.k, self.p = k, p
        self.a = p.row_axis
        self.L = p.domain[self.a]
        self.acc: dict[str, str] = {}  # reduction out -> the variable holding the line's result
        self.staged: dict[tuple, str] = {}  # (value, map) -> the row array holding it
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
        if (value, tuple(m)) in self.staged:
            return f"{self.staged[(value, tuple(m))]}[c{self.a}]"
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

    def plain_read(self, value: str, m: Map) -> Callable[[str], str] | None:
        """How the reduce loop reads a reduction input as it is (given the row coordinate), if it can."""
        key = (value, tuple(m))
        if key in self.staged:
            return lambda col: f"{self.staged[key]}[{col}]"
        plain = (value not in self.p.ops and value not in self.k.uniform_names and self.a in m
                 and self.k.dtype(value) not in (DType.F16, DType.BF16))
        if not plain:
            return None
        return lambda col: self.k.load(value, m, lambda d: col if d == self.a else f"c{d}")

    def stage(self, reds: list[Reduction]) -> tuple[list[str], dict[str, Callable[[str], str]]]:
        """Lines evaluating the reductions' inputs into row arrays, and how to read each input."""
        k = self.k
        reads: dict[str, Callable[[str], str]] = {}
        body: list[str] = []
        arrays: list[str] = []
        w = k.walk(body.append, self.coord, None, self.anchor)
        for r in reds:
            value, m = r.op.args[0], self.input_map(r)
            plain = self.plain_read(value, m)
            if plain is not None:
                reads[r.op.out] = plain
                continue
            name = k.fresh("row")
            x = w.value(value, m)
            body.append(f"{name}[c{self.a}] = {x}")
            arrays.append(f"{name} = np.empty({self.L}, np.{k.lang.ctype(k.dtype(value))})")
            self.staged[(value, tuple(m))] = name
            reads[r.op.out] = self.plain_read(value, m)
        return (arrays + self.hoisted(self.along_row(body)) if arrays else []), reads

    def phase(self, index: int) -> list[str]:
        """Stage and reduce the phase's reductions, then bind their results.

        Lane ``j`` of a reduction's partials accumulates the row's elements ``j, j + LANES, ...``
        (the tail goes to lane 0) and the lanes are combined in order: the inner loop over the
        lanes carries no dependency, so LLVM vectorizes it without reassociating anything.
        """
        k = self.k
        reds = self.passes[index]
        lines, reads = self.stage(reds)
        parts = {r.op.out: k.fresh("part") for r in reds}

        def accumulate(lane: str, col: str) -> list[str]:
            return [f"{parts[r.op.out]}[{lane}] = " + k.lang.apply(
                k.lang.combine[r.op.op], k.dtype(r.op.out), a=f"{parts[r.op.out]}[{lane}]", b=reads[r.op.out](col))
                for r in reds]

        lines += [f"{parts[r.op.out]} = np.full({LANES}, {k.lang.identity(r.op.op, k.dtype(r.op.out))})"
                  for r in reds]
        whole = self.L - self.L % LANES
        if whole:
            lines += [f"for c{self.a}_ in range(0, {whole}, {LANES}):", f"    for e in range({LANES}):",
                      *indent(accumulate("e", f"c{self.a}_ + e"), 2)]
        if whole < self.L:
            lines += [f"for c{self.a} in range({whole}, {self.L}):", *indent(accumulate("0", f"c{self.a}"))]
        for r in reds:
            name, part, dtype = k.fresh("r"), parts[r.op.out], k.dtype(r.op.out)
            lines += [f"{name} = {part}[0]", f"for e in range(1, {LANES}):",
                      f"    {name} = {k.lang.apply(k.lang.combine[r.op.op], dtype, a=name, b=f'{part}[e]')}"]
            if rounds(r.op):
                lines.append(f"{name} = {k.lang.round(name, dtype)}")
            self.acc[r.op.out] = name
        return lines

    def final(self) -> list[str]:
        """Stores: values varying along the row in one last loop, per-line values after it."""
        k = self.k
        varying = [s for s in self.p.stores if self.a in s.map]
        lines: list[str] = []
        if varying:
            body: list[str] = []
            w = k.walk(body.append, self.coord, None, self.anchor)
            for s in varying:
                body += k.store_lines(s, k.unrounded(body, w.value(s.value, s.map), s.value), self.coord)
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
