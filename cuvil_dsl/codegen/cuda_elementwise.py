"""The elementwise kernel: a grid-stride loop over vectors of the domain.

Each thread takes VEC consecutive elements per step. Buffers that run with stride 1 along
the domain's last axis are read and written with 16-byte accesses (VEC = 16 bytes of the
narrowest such dtype, at most 8 elements); broadcast and transposed operands are gathered
per element with compile-time strides. When every access is the plain flat index, vectors
may cross rows and a scalar tail loop takes the last ``total % VEC`` elements; otherwise
VEC divides the last axis so a vector never leaves its row. Buffers come 256-byte aligned
from the runtime's arena, so every vector is aligned.
"""

from __future__ import annotations

from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.program import Store

MAX_VEC = 8


def _is_flat(k: CudaKernel, value: str, m) -> bool:
    return tuple(m) == tuple(range(len(k.p.domain))) and k.p.shape(value) == k.p.domain


def _vector_width(k: CudaKernel, accesses: list) -> int:
    domain = k.p.domain
    if not domain:
        return 1
    last = len(domain) - 1
    vectorizable = [v for v, m in accesses if k.contiguous_axis(v, m, last)]
    if not vectorizable:
        return 1
    vec = min(MAX_VEC, 16 // min(k.p.types[v].dtype.itemsize for v in vectorizable))
    if not all(_is_flat(k, v, m) for v, m in accesses):
        while domain[-1] % vec:
            vec //= 2
    return vec


def _coords(k: CudaKernel, base: str) -> list[str]:
    """Declarations of the domain coordinates of flat index ``base``."""
    domain, lines, inner = k.p.domain, [], 1
    for d in reversed(range(len(domain))):
        div = f"{base} / {k.stride_literal(inner)}" if inner > 1 else base
        lines.insert(0, f"const {k.index_t} c{d} = {div} % {domain[d]};" if d else f"const {k.index_t} c0 = {div};")
        inner *= domain[d]
    return lines


def render(k: CudaKernel, entry: str) -> Emitted:
    p = k.p
    threads = k.config.block
    total = max(1, element_count(p.domain))
    stores = list(p.stores)
    leaves = k.leaves([(s.value, s.map) for s in stores])
    accesses = leaves + [(s.value, s.map) for s in stores]
    vec = _vector_width(k, accesses)
    all_flat = all(_is_flat(k, v, m) for v, m in accesses)
    nvec = total // vec
    last = len(p.domain) - 1
    vec_leaves = [(v, m) for v, m in leaves if vec > 1 and k.contiguous_axis(v, m, last)]
    vec_stores = [s for s in stores if vec > 1 and k.contiguous_axis(s.value, s.map, last)]
    idx = k.index_t

    body = [f"const {idx} stride = ({idx})gridDim.x * {threads};",
            f"for ({idx} v = ({idx})blockIdx.x * {threads} + threadIdx.x; v < {nvec}; v += stride) {{",
            f"    const {idx} i0 = v * {vec};" if vec > 1 else f"    const {idx} i0 = v;"]
    if not all_flat:
        body += indent(_coords(k, "i0"))

    def coord(d: int) -> str:
        return f"(c{d} + e)" if d == last and vec > 1 else f"c{d}"

    arrays: dict = {}
    for v, m in vec_leaves:
        name = arrays[(v, m)] = k.fresh("in")
        off = k.offset(v, m, lambda d: f"c{d}", "i0")
        body += [f"    __align__(16) {k.storage(v)} {name}[{vec}];",
                 f"    cvl_copy_vec<{k.storage(v)}, {vec}>({name}, {k.names[v]} + {off});"]
    staged: dict[str, str] = {}
    for s in vec_stores:
        staged[s.value] = k.fresh("out")
        body.append(f"    __align__(16) {k.storage(s.value)} {staged[s.value]}[{vec}];")
    inner: list[str] = []

    def leaf(value: str, m) -> str | None:
        name = arrays.get((value, tuple(m)))
        return None if name is None else k.lang.load(f"{name}[e]", k.dtype(value))

    flat = "(i0 + e)" if vec > 1 else "i0"
    w = k.walk(inner.append, coord, flat, leaf)
    for s in stores:
        expr = w.value(s.value, s.map)
        if s.value in staged:
            inner.append(f"{staged[s.value]}[e] = {k.lang.store(expr, k.dtype(s.value))};")
        else:
            inner += k.store_lines(s, expr, coord, flat)
    if vec > 1:
        body += ["#pragma unroll", f"    for (int e = 0; e < {vec}; ++e) {{", *indent(inner, 2), "    }"]
    else:
        body += indent(inner)
    for s in vec_stores:
        line = f"cvl_copy_vec<{k.storage(s.value)}, {vec}>({k.names[s.value]} + " \
               f"{k.offset(s.value, s.map, lambda d: f'c{d}', 'i0')}, {staged[s.value]});"
        cond = k.guard(Store(s.value, s.map), lambda d: f"c{d}")
        body.append(f"    if ({cond}) {line}" if cond else f"    {line}")
    body.append("}")
    if nvec * vec < total:
        body += _tail(k, nvec * vec, total, threads, stores)
    blocks = max(1, min(-(-max(nvec, 1) // threads), k.sm_count * (2048 // threads) * 4))
    lines = [*k.signature(entry, threads), *indent(body), "}"]
    return Emitted(lines, (blocks, 1, 1), (threads, 1, 1))


def _tail(k: CudaKernel, start: int, total: int, threads: int, stores: list[Store]) -> list[str]:
    """The elements after the last whole vector (every access is flat here)."""
    idx = k.index_t
    inner: list[str] = []
    w = k.walk(inner.append, lambda d: "i", "i")
    for s in stores:
        inner += k.store_lines(s, w.value(s.value, s.map), lambda d: "i", "i")
    return [f"for ({idx} i = {start} + ({idx})blockIdx.x * {threads} + threadIdx.x; i < {total}; i += stride) {{",
            *indent(inner), "}"]
