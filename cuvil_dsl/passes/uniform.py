"""Uniform values: scalar work evaluated once on the host, passed to kernels as arguments.

Needs a checked pipeline. Guarantees: every op whose result is a weak scalar, or a rank-0
tensor computed only from scalars (``to_tensor``, ``cast`` and any elementwise op on such
values), is uniform; nothing that reads a tensor parameter or a tensor result is. Keeping
scalar parameters out of the generated source means changing ``params`` never recompiles.
"""

from __future__ import annotations

from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.types import ScalarType, TensorType


def _is_uniform(op: ir.Op, uniform: set[str]) -> bool:
    if op.op not in ir.ELEMENTWISE_OPS or not all(a in uniform for a in op.args):
        return False
    return isinstance(op.type, ScalarType) or (isinstance(op.type, TensorType) and op.type.rank == 0)


def split_uniform(pipeline: ir.Pipeline) -> tuple[tuple[ir.Op, ...], frozenset[str]]:
    """The uniform ops in program order, and the ids of every uniform value (scalar params too)."""
    uniform = {p.name for p in pipeline.scalar_params}
    host: list[ir.Op] = []
    for op in pipeline.ops():
        if _is_uniform(op, uniform):
            uniform.add(op.out)
            host.append(op)
    return tuple(host), frozenset(uniform)
