"""Index maps: how each value of a fused kernel is laid over the kernel's iteration space.

A fused kernel iterates over one *domain* (a shape: the elementwise result, the rows of a
reduction, the output of a GEMM). Every value it computes or reads is addressed from the
domain point through a *map*: for each axis of the value, the domain axis whose coordinate
indexes it, or ``None`` when the value's axis is a literal 1 (coordinate 0). Broadcasting
drops leading axes and pins size-1 axes; ``.T`` swaps the last two entries.

The planner uses maps to decide what can share a kernel (an *anchored* value, one that
depends on a reduction, row op or GEMM of the same kernel, exists only at its home map, so
reading it elsewhere would need another kernel); the renderers use the same maps to turn a
domain point into buffer offsets and store guards. Both work on symbolic shapes, so they
always agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.types import Dim, Shape, TensorType

Map = tuple  # tuple[int | None, ...]

ROW_REDUCTIONS = frozenset(("rsum", "rmax", "rmin"))  # the renderers' primitive row reductions
REDUCE_OPS = frozenset(ir.REDUCE_OPS) | ROW_REDUCTIONS
ROW_OPS = frozenset(ir.ROW_OPS)
ANCHOR_OPS = REDUCE_OPS | ROW_OPS | {"matmul"}


def is_one(d: Dim) -> bool:
    return isinstance(d, int) and d == 1


def shape_of(op: ir.Op) -> Shape:
    assert isinstance(op.type, TensorType), f"{op.out} is not a tensor"
    return op.type.shape


def aligned(shape: Shape, domain: Shape) -> Map | None:
    """The map of a value broadcast NumPy-style (right-aligned) over ``domain``, or None."""
    off = len(domain) - len(shape)
    if off < 0:
        return None
    out: list[int | None] = []
    for j, d in enumerate(shape):
        if is_one(d):
            out.append(None)
        elif d == domain[off + j]:
            out.append(off + j)
        else:
            return None
    return tuple(out)


def broadcast_shapes(a: Shape, b: Shape) -> Shape | None:
    """Symbolic NumPy broadcast (only a literal 1 broadcasts), or None when they clash."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x == y or is_one(y):
            out.append(x)
        elif is_one(x):
            out.append(y)
        else:
            return None
    return tuple(out)


def operand_map(op: ir.Op, out_map: Map, k: int, arg_shape: Shape, row_axis: int | None) -> Map:
    """How ``op`` reads its ``k``-th operand when its result is read at ``out_map``."""
    name = op.op
    if name == "transpose":
        m = list(out_map)
        m[-1], m[-2] = m[-2], m[-1]
        return tuple(None if is_one(d) else m[j] for j, d in enumerate(arg_shape))
    if name in REDUCE_OPS:
        ra = op.attr("axis")
        rest = out_map[:ra] + out_map[ra + 1:] if op.attr("keepdims") else out_map
        return rest[:ra] + (row_axis,) + rest[ra:]
    if name in ("layernorm", "rmsnorm") and k > 0:
        return (out_map[-1],)
    # elementwise and softmax-like ops: right-aligned broadcast of the result's map
    off = len(out_map) - len(arg_shape)
    return tuple(None if is_one(d) else out_map[off + j] for j, d in enumerate(arg_shape))


@dataclass(frozen=True)
class Layout:
    """The maps of one kernel's values over its domain."""

    domain: Shape
    row_axis: int | None  # the reduced axis of a row kernel (or the softmax axis of a GEMM)
    maps: dict  # value id -> Map (its home map: where it is computed and stored)
    anchored: frozenset  # values that exist only at their home map


@dataclass(frozen=True)
class Misfit:
    """Why an op cannot join a kernel's iteration space."""

    op: ir.Op
    reason: str


def _valid(shape: Shape, m: Map, domain: Shape) -> bool:
    used = [a for a in m if a is not None]
    if len(set(used)) != len(used):
        return False
    return all(
        (a is None and is_one(d)) or (a is not None and not is_one(d) and domain[a] == d)
        for d, a in zip(shape, m)
    )


def _arg_candidate(op: ir.Op, j: int, k: int, arg_shape: Shape, arg_map: Map, out_rank: int) -> int | None:
    """The domain axis operand ``k`` suggests for result axis ``j``, if any."""
    if op.op == "transpose":
        jj = {out_rank - 1: out_rank - 2, out_rank - 2: out_rank - 1}.get(j, j)
    else:
        jj = j - (out_rank - len(arg_shape))
    if jj < 0 or is_one(arg_shape[jj]):
        return None
    return arg_map[jj]


def _elementwise_map(op: ir.Op, layout_maps: dict, anchored: set, types: dict, domain: Shape) -> Map | str:
    shape = shape_of(op)
    default = aligned(shape, domain)
    result: list[int | None] = []
    for j, d in enumerate(shape):
        if is_one(d):
            result.append(None)
            continue
        picks = {False: [], True: []}
        for k, a in enumerate(op.args):
            if a in layout_maps:
                c = _arg_candidate(op, j, k, types[a].shape, layout_maps[a], len(shape))
                if c is not None:
                    picks[a in anchored].append(c)
        if len(set(picks[True])) > 1:
            return "it combines values of this kernel that sit at different positions"
        choice = (picks[True] or picks[False] or [None])[0]
        if choice is None and default is not None:
            choice = default[j]
        result.append(choice)
    m = tuple(result)
    if not _valid(shape, m, domain):
        return "its shape cannot share the kernel's iteration space"
    return m


def _row_map(op: ir.Op, layout_maps: dict, types: dict, domain: Shape, row_axis: int | None) -> Map | str:
    x = op.args[0]
    x_shape = types[x].shape
    in_map = layout_maps[x] if x in layout_maps else aligned(x_shape, domain)
    if in_map is None or not _valid(x_shape, in_map, domain):
        return "its operand's shape cannot share the kernel's iteration space"
    axis = op.attr("axis", len(x_shape) - 1)
    # a row of one element has no domain axis in the map (extents of 1 are never mapped): it runs
    # along the kernel's row axis when that axis has extent 1 too
    single = is_one(x_shape[axis]) and row_axis is not None and is_one(domain[row_axis]) and in_map[axis] is None
    if row_axis is None or (in_map[axis] != row_axis and not single):
        return "it runs along another axis than the kernel's row operation"
    if op.op in REDUCE_OPS:
        if op.attr("keepdims"):
            return in_map[:axis] + (None,) + in_map[axis + 1:]
        return in_map[:axis] + in_map[axis + 1:]
    return in_map


def derive_layout(ops: tuple[ir.Op, ...], domain: Shape, row_axis: int | None, types: dict,
                  views: frozenset = frozenset(), start: Layout | None = None) -> Layout | Misfit:
    """Give every op of a kernel its home map over ``domain``, or say which op does not fit.

    ``types`` maps every value id the ops read to its type. A GEMM's result and the results
    of reductions and row ops are anchored, and so is everything computed from them: those
    must be read exactly where they were computed. ``views`` are transposes never stored: one
    of a value from memory has no place of its own (its readers address the memory through it).

    ``start`` is the layout already derived for the ops before ``ops`` over the same domain
    and row axis: each op's map depends only on the ops before it, so the result is the same
    as deriving the whole list again, and the planner, which tries ops one by one against
    kernels of thousands of ops, stays linear per try instead of redoing the kernel each time.
    """
    if start is not None:
        assert tuple(start.domain) == tuple(domain) and start.row_axis == row_axis, "resumed over another space"
    maps: dict = dict(start.maps) if start is not None else {}
    anchored: set = set(start.anchored) if start is not None else set()
    for op in ops:
        if op.out in views and op.args[0] not in maps:
            continue
        if op.op == "matmul":
            shape = shape_of(op)
            if tuple(shape) != tuple(domain):
                return Misfit(op, "a second `@` cannot share the first one's iteration space")
            m: Map | str = tuple(None if is_one(d) else j for j, d in enumerate(shape))
        elif op.op in REDUCE_OPS or op.op in ROW_OPS:
            m = _row_map(op, maps, types, domain, row_axis)
        else:
            m = _elementwise_map(op, maps, anchored, types, domain)
        if isinstance(m, str):
            return Misfit(op, m)
        for k, a in enumerate(op.args):
            reads_home = k == 0 and (op.op in REDUCE_OPS or op.op in ROW_OPS)
            if a in anchored and not reads_home:
                want = operand_map(op, m, k, types[a].shape, row_axis)
                if any(w != h for w, h, d in zip(want, maps[a], types[a].shape) if not is_one(d)):
                    return Misfit(op, "it reads a value of this kernel at another position than where it was computed")
        maps[op.out] = m
        if op.op in ANCHOR_OPS or any(a in anchored for a in op.args):
            anchored.add(op.out)
    return Layout(tuple(domain), row_axis, maps, frozenset(anchored))


def attention_layout(layout: Layout, op: ir.Op) -> Layout:
    """``layout`` (a GEMM and its row softmax over the logits' domain ``[..., M, N]``) with the second
    `@` of an attention kernel: its product ``[..., M, Dv]`` shares the batch axes and M, and its last
    axis is no axis of the domain (``None`` here, though not of extent 1: the attention templates
    address the product themselves)."""
    shape = shape_of(op)
    rank = len(layout.domain)
    m = tuple(None if is_one(d) or j == len(shape) - 1 else j + rank - len(shape) for j, d in enumerate(shape))
    return Layout(layout.domain, layout.row_axis, {**layout.maps, op.out: m}, layout.anchored | {op.out})


def kernel_layout(kind: str, ops: tuple[ir.Op, ...], domain: Shape, row_axis: int | None, types: dict,
                  views: frozenset = frozenset()) -> Layout | Misfit:
    """The layout of a whole kernel's ops: :func:`derive_layout`, and for an ``attention`` kernel (whose
    last op is the second `@`) :func:`attention_layout` on top of the layout of the ops before it."""
    if kind != "attention":
        return derive_layout(ops, domain, row_axis, types, views)
    first = derive_layout(ops[:-1], domain, row_axis, types, views)
    return first if isinstance(first, Misfit) else attention_layout(first, ops[-1])
