"""Shape rules: NumPy broadcasting with symbolic dimensions, and dimension agreement.

A dimension broadcasts only if it is the literal 1; symbols never broadcast, even when bound
to 1. Two symbols match only if they are the same symbol. A symbol and a literal other than 1
match only if the symbol is bound to that literal: that becomes a :class:`Constraint`,
checked when shapes are bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.ir.nodes import Constraint
from cuvil_dsl.types import Dim, Shape, Sym, dim_str, shape_str


@dataclass(frozen=True)
class Mismatch:
    message: str


def unify_dims(a: Dim, b: Dim, span: Span, why: str, constraints: list[Constraint]) -> Dim | Mismatch:
    """Two dimensions that must be the same size (no broadcasting)."""
    if a == b:
        return a
    if isinstance(a, Sym) and isinstance(b, Sym):
        return Mismatch(f"`{a}` and `{b}` are different symbols")
    if isinstance(a, int) and isinstance(b, int):
        return Mismatch(f"{a} != {b}")
    sym, lit = (a, b) if isinstance(a, Sym) else (b, a)
    constraints.append(Constraint(sym.name, int(lit), span, why))
    return lit


def broadcast(shapes: list[Shape], span: Span, constraints: list[Constraint]) -> Shape | Mismatch:
    """Right-aligned broadcast of several shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for pos in range(rank):
        dims = [s[len(s) - rank + pos] for s in shapes if len(s) - rank + pos >= 0]
        real = [d for d in dims if d != 1]
        if not real:
            out.append(1)
            continue
        result: Dim = real[0]
        for d in real[1:]:
            unified = unify_dims(result, d, span, "broadcast", constraints)
            if isinstance(unified, Mismatch):
                shown = " and ".join(shape_str(s) for s in shapes)
                return Mismatch(
                    f"cannot broadcast {shown}: axis {pos - rank} has {dim_str(result)} and {dim_str(d)} "
                    f"({unified.message}); only a literal 1 broadcasts"
                )
            result = unified
        out.append(result)
    return tuple(out)


def normalize_axis(axis: int, rank: int) -> int | None:
    if -rank <= axis < rank:
        return axis % rank
    return None
