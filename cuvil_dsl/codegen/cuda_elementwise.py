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

from dataclasses import replace

from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.program import Store
from cuvil_dsl.types import DType

MAX_VEC = 8
# The default shape of a vectorised kernel, as torch.compile's inductor launches 2^26 f32 elements
# (1024-element blocks of 128 threads): 128 threads, two 16-byte vectors a thread a block apart in
# the block's contiguous chunk. H200, y = relu(x*1.5 + 0.25)*2 - 0.5, f32 2^26 (ab_rows round 4,
# 2026-11-30): 131.8 us against 133.0 for 256 threads with four vectors a grid stride apart (the
# previous default), 132.7 for four vectors chunked (128 or 256 threads), 133.6 for 512 threads.
MAX_UNROLL = 2
DEFAULT_THREADS = 128
HEAVY_OPS = frozenset({"sin", "cos", "tanh", "erf", "pow", "gelu", "gelu_tanh"})
FULL_THREADS = 2048  # resident threads per multiprocessor at full occupancy
DEFAULT_WAVES = 0  # one block per chunk: no tail of a partial wave, whatever the occupancy
STREAMING_BYTES = 128 << 20  # about twice an H100/H200 L2

# Tuning for A/B runs (benchmarks/ab_rows.py); every key changes the generated source (the compile
# cache key). Defaults apply when a key is absent:
#   "unroll": vectors per thread per step, all loaded before any is used (default: up to
#             MAX_UNROLL, with at most 32 loaded elements per thread live);
#   "waves": the grid, in full-occupancy waves of blocks (grid-stride loop); 0 for one block per
#             chunk of threads x unroll vectors (default 0);
#   "min_blocks": __launch_bounds__ minimum blocks per multiprocessor (default 1: ptxas chooses);
#   "threads": threads per block (a spec's `block` wins; default DEFAULT_THREADS);
#   "chunked": with one block per chunk (waves 0), a thread's `unroll` vectors are a block apart
#             inside its block's contiguous chunk, not a grid stride apart (default True);
#   "load_hint": a key of LOAD_HINTS: 16-byte loads with those PTX qualifiers (default none);
#   "streaming": evict-first loads and stores (ld/st.global.cs) of data read or written once
#             (default: when the kernel moves at least STREAMING_BYTES).
TUNING: dict = {}

STREAM_HELPERS = r"""
// 16-byte vectors read or written once: evict-first (.cs), so streams do not flush the L2
template <typename T, int N>
__device__ __forceinline__ void cvl_load_cs(T* dst, const T* src) {
    static_assert(N * sizeof(T) == 16, "one 16-byte vector");
    *reinterpret_cast<int4*>(dst) = __ldcs(reinterpret_cast<const int4*>(src));
}
template <typename T, int N>
__device__ __forceinline__ void cvl_store_cs(T* dst, const T* src) {
    static_assert(N * sizeof(T) == 16, "one 16-byte vector");
    __stcs(reinterpret_cast<int4*>(dst), *reinterpret_cast<const int4*>(src));
}
"""

# "load_hint" (A/B only): 16-byte loads with these PTX qualifiers (read-only path, L1 bypass, L2
# sector prefetch) instead of plain ones
LOAD_HINTS = {"nc": ".nc", "nc_noalloc": ".nc.L1::no_allocate", "l2_256": ".L2::256B",
              "nc_noalloc_l2_256": ".nc.L1::no_allocate.L2::256B"}
LOAD_HINT_HELPER = r"""
template <typename T, int N>
__device__ __forceinline__ void cvl_load_hinted(T* dst, const T* src) {
    static_assert(N * sizeof(T) == 16, "one 16-byte vector");
    uint4 v;
    asm volatile("ld.globalQUALIFIERS.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
    *reinterpret_cast<uint4*>(dst) = v;
}
"""


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


def _coords(k: CudaKernel, base: str, tag: str = "") -> list[str]:
    """Declarations of the domain coordinates of flat index ``base`` (names end in ``tag``)."""
    domain, lines, inner = k.p.domain, [], 1
    for d in reversed(range(len(domain))):
        div = f"{base} / {k.stride_literal(inner)}" if inner > 1 else base
        lines.insert(0, f"const {k.index_t} c{d}{tag} = {div} % {domain[d]};" if d
                     else f"const {k.index_t} c0{tag} = {div};")
        inner *= domain[d]
    return lines


def _streaming(k: CudaKernel, total: int, accesses: list) -> bool:
    """Evict-first (``.cs``) accesses: the data a kernel streams is far larger than the L2."""
    # Off by default: on the H200 the .cs hints made the f32 chain slower (140.3 us against
    # 133.1 us without them, 2^26 elements, benchmarks/ab_rows.py, 2026-11-29).
    if not TUNING.get("streaming", False):
        return False
    moved = sum(k.p.size(v) * k.p.types[v].dtype.itemsize for v, m in dict.fromkeys(accesses))
    return moved >= STREAMING_BYTES


def _unroll(k: CudaKernel, vec_leaves: list, vec: int) -> int:
    """Vectors per thread per step: loads in flight, bounded by the registers they hold. Kernels
    with long math (argument reduction with a local-memory slow path, f64) keep one."""
    if "unroll" in TUNING:
        return max(1, int(TUNING["unroll"]))
    heavy = any(op.op in HEAVY_OPS or k.p.types[op.out].dtype is DType.F64 for op in k.p.ops.values())
    if vec == 1 or heavy:
        return 1
    return max(1, min(MAX_UNROLL, 32 // max(1, len(vec_leaves) * vec)))


def render(k: CudaKernel, entry: str) -> Emitted:
    p = k.p
    threads = k.config.block
    if "block" not in k.config.overridden:
        threads = int(TUNING.get("threads", DEFAULT_THREADS))
        k.config = replace(k.config, block=threads)
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
    unroll = _unroll(k, vec_leaves, vec)
    streaming = _streaming(k, total, accesses)
    helpers = []

    hint = TUNING.get("load_hint")

    def copy(value: str, dst: str, src: str, load: bool, flat: bool) -> str:
        storage = k.storage(value)
        if hint and load and vec * k.dtype(value).itemsize == 16:
            helper = LOAD_HINT_HELPER.replace("QUALIFIERS", LOAD_HINTS[hint])
            if helper not in helpers:
                helpers.append(helper)
            return f"cvl_load_hinted<{storage}, {vec}>({dst}, {src});"
        if streaming and flat and vec * k.dtype(value).itemsize == 16:
            if STREAM_HELPERS not in helpers:
                helpers.append(STREAM_HELPERS)
            return f"cvl_{'load' if load else 'store'}_cs<{storage}, {vec}>({dst}, {src});"
        return f"cvl_copy_vec<{storage}, {vec}>({dst}, {src});"

    def step(base: str, tag: str) -> tuple[list[str], list[str]]:
        """One vector of the domain at vector index ``base``: its loads, then its work."""
        def coord(d: int) -> str:
            return f"(c{d}{tag} + e)" if d == last and vec > 1 else f"c{d}{tag}"

        i0 = f"i0{tag}"
        loads = [f"const {idx} {i0} = {base} * {vec};" if vec > 1 else f"const {idx} {i0} = {base};"]
        if not all_flat:
            loads += _coords(k, i0, tag)
        arrays: dict = {}
        for v, m in vec_leaves:
            name = arrays[(v, m)] = k.fresh("in")
            off = k.offset(v, m, lambda d: f"c{d}{tag}", i0)
            loads += [f"__align__(16) {k.storage(v)} {name}[{vec}];",
                      copy(v, name, f"{k.names[v]} + {off}", True, _is_flat(k, v, m))]
        work: list[str] = []
        staged: dict[str, str] = {}
        for s in vec_stores:
            staged[s.value] = k.fresh("out")
            work.append(f"__align__(16) {k.storage(s.value)} {staged[s.value]}[{vec}];")
        inner: list[str] = []

        def leaf(value: str, m) -> str | None:
            name = arrays.get((value, tuple(m)))
            return None if name is None else k.lang.load(f"{name}[e]", k.dtype(value))

        flat = f"({i0} + e)" if vec > 1 else i0
        w = k.walk(inner.append, coord, flat, leaf)
        for s in stores:
            expr = k.unrounded(inner, w.value(s.value, s.map), s.value)
            if s.value in staged:
                inner.append(f"{staged[s.value]}[e] = {k.lang.store(expr, k.dtype(s.value))};")
            else:
                inner += k.store_lines(s, expr, coord, flat)
        if vec > 1:
            work += ["#pragma unroll", f"for (int e = 0; e < {vec}; ++e) {{", *indent(inner), "}"]
        else:
            work += inner
        for s in vec_stores:
            line = copy(s.value, f"{k.names[s.value]} + {k.offset(s.value, s.map, lambda d: f'c{d}{tag}', i0)}",
                        staged[s.value], False, True)
            cond = k.guard(Store(s.value, s.map), lambda d: f"c{d}{tag}")
            work.append(f"if ({cond}) {line}" if cond else line)
        return loads, work

    body = [f"const {idx} stride = ({idx})gridDim.x * {threads};",
            f"{idx} v = ({idx})blockIdx.x * {threads} + threadIdx.x;"]
    waves = TUNING.get("waves", DEFAULT_WAVES)
    chunked = unroll > 1 and not waves and bool(TUNING.get("chunked", True))
    if chunked:
        # one block per chunk of threads x unroll vectors, its vectors a block apart (the block
        # reads one contiguous span), every load issued before any work; the last chunk one by one
        loads, works = [], []
        for u in range(unroll):
            ld, wk = step(f"(c + {u * threads})" if u else "c", f"_{u}")
            loads += ld
            works += ["{", *indent(wk), "}"]
        ld, wk = step("v", "")
        body = [f"const {idx} stride = ({idx})gridDim.x * {threads};",
                f"const {idx} c = ({idx})blockIdx.x * {threads * unroll} + threadIdx.x;",
                f"if (c + {(unroll - 1) * threads} < {nvec}) {{", *indent(loads + works), "} else {",
                f"    for ({idx} v = c; v < {nvec}; v += {threads}) {{", *indent(ld + wk, 2), "    }", "}"]
    elif unroll > 1:
        # `unroll` vectors a grid stride apart per step, every load issued before any work
        loads, works = [], []
        for u in range(unroll):
            ld, wk = step(f"(v + {u} * stride)" if u else "v", f"_{u}")
            loads += ld
            works += ["{", *indent(wk), "}"]
        body += [f"for (; v < {nvec} - {unroll - 1} * stride; v += {unroll} * stride) {{",
                 *indent(loads + works), "}"]
    if not chunked:
        ld, wk = step("v", "")
        body += [f"for (; v < {nvec}; v += stride) {{", *indent(ld + wk), "}"]
    if nvec * vec < total:
        body += _tail(k, nvec * vec, total, threads, stores)
    needed = -(-max(nvec, 1) // (threads * unroll))
    resident = k.sm_count * max(1, FULL_THREADS // threads)
    blocks = max(1, needed if not waves else min(needed, resident * int(waves)))
    note = (f"// elementwise template: {threads} threads, {vec}-element vectors, {unroll} per step, "
            f"{blocks} blocks, streaming {int(streaming)}" + (", chunked" if chunked else ""))
    if "launch_bounds" not in k.config.overridden and "min_blocks" in TUNING:
        k.config = replace(k.config, min_blocks=int(TUNING["min_blocks"]))
    lines = [note, *k.signature(entry, threads), *indent(body), "}"]
    return Emitted(lines, (blocks, 1, 1), (threads, 1, 1), helpers="".join(helpers))


def _tail(k: CudaKernel, start: int, total: int, threads: int, stores: list[Store]) -> list[str]:
    """The elements after the last whole vector (every access is flat here)."""
    idx = k.index_t
    inner: list[str] = []
    w = k.walk(inner.append, lambda d: "i", "i")
    for s in stores:
        inner += k.store_lines(s, w.value(s.value, s.map), lambda d: "i", "i")
    return [f"for ({idx} i = {start} + ({idx})blockIdx.x * {threads} + threadIdx.x; i < {total}; i += stride) {{",
            *indent(inner), "}"]
