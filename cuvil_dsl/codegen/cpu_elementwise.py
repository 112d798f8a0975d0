"""The elementwise kernel on the CPU: one fused ``prange`` loop over the domain.

When every access is the plain flat index (no broadcast, no transpose, no store guard), the
loop runs over the flat index, which LLVM vectorizes. Otherwise a ``prange`` over the domain
minus its last axis decodes the coordinates once per row, and an inner loop runs along the
last axis, so contiguous operands are still read with unit stride and broadcast operands are
hoisted out of it.
"""

from __future__ import annotations

from cuvil_dsl.codegen.cpu import CpuKernel, indent, prod


def render(k: CpuKernel, entry: str) -> list[str]:
    p = k.p
    stores = [(s.value, s.map) for s in p.stores]
    accesses = k.leaves(stores) + stores
    domain = p.domain
    inner: list[str] = []
    if len(domain) <= 1 or all(k.at.is_flat(v, m) for v, m in accesses):
        # rank 0 or 1, or every access flat: the flat index is every coordinate there is
        w = k.walk(inner.append, lambda d: "i", "i")
        for s in p.stores:
            inner += k.store_lines(s, k.unrounded(inner, w.value(s.value, s.map), s.value), lambda d: "i", "i")
        body = [f"for i in numba.prange({prod(domain)}):", *indent(inner)]
    else:
        last = len(domain) - 1

        def coord(d: int) -> str:
            return f"c{d}"

        w = k.walk(inner.append, coord)
        for s in p.stores:
            inner += k.store_lines(s, k.unrounded(inner, w.value(s.value, s.map), s.value), coord)
        body = [f"for q in numba.prange({prod(domain[:-1])}):",
                *indent(k.coords("q", list(range(last)))),
                f"    for c{last} in range({domain[-1]}):", *indent(inner, 2)]
    return k.jit_function(entry, body)
