"""Buffer addressing shared by renderers: element offsets from domain coordinates, store guards.

Backend-independent: a buffer is a flat row-major array of its shape, a domain point is a
coordinate expression per domain axis, and a value's map (see
:mod:`~cuvil_dsl.passes.indexing`) says which coordinate indexes each of its axes. Sizes are
bound, so strides are literals the compiler folds.
"""

from __future__ import annotations

from typing import Callable

from cuvil_dsl.codegen.base import PointWalk
from cuvil_dsl.codegen.program import KernelProgram
from cuvil_dsl.passes.indexing import Map

Coord = Callable[[int], str]


class Addressing:
    def __init__(self, program: KernelProgram):
        self.p = program

    def is_flat(self, value: str, m: Map) -> bool:
        """Is ``value`` laid out exactly like the domain (its offset is the flat domain index)?"""
        return tuple(m) == tuple(range(len(self.p.domain))) and self.p.shape(value) == self.p.domain

    def offset(self, value: str, m: Map, coord: Coord, flat: str | None = None) -> str:
        """Element offset of ``value``'s element at the current point (``m``: its map)."""
        if flat is not None and self.is_flat(value, m):
            return flat
        terms = []
        for d, stride, size in zip(m, self.p.strides(value), self.p.shape(value)):
            if d is None or size == 1:
                continue
            c = coord(d)
            c = c if c.isidentifier() or c.isdigit() or c.startswith("(") else f"({c})"
            terms.append(c if stride == 1 else f"{c} * {stride}")
        return " + ".join(terms) or "0"

    def missing_axes(self, m: Map, skip: tuple[int, ...] = ()) -> list[int]:
        """Domain axes (of size > 1) a value stored at map ``m`` does not vary along: it is written
        once, at coordinate 0 of each."""
        return [d for d in range(len(self.p.domain)) if d not in m and d not in skip and self.p.domain[d] > 1]

    def leaves(self, walk: Callable[[Callable[[str, Map], str]], PointWalk],
               roots: list[tuple[str, Map]]) -> list[tuple[str, Map]]:
        """The (buffer, map) reads that rendering ``roots`` needs, in first-use order.

        ``walk(record)`` builds a throw-away walk whose buffer reads call ``record``.
        """
        seen: list[tuple[str, Map]] = []

        def record(value: str, m: Map) -> str:
            if (value, tuple(m)) not in seen:
                seen.append((value, tuple(m)))
            return "x"

        w = walk(record)
        for value, m in roots:
            w.value(value, m)
        return seen
