"""Row kernels: reductions, softmax, log_softmax, layernorm and rmsnorm with fused prologues
and epilogues, along any axis.

A row kernel runs its phases (see :mod:`~cuvil_dsl.codegen.program`) over each row: every
phase accumulates its reductions per thread, combines them across the threads of the row,
and the final pass stores. Three shapes, chosen from the sizes:

* **contiguous, cached** (reduced axis innermost, row fits in registers): the data a
  reduction reads is loaded once, with 16-byte vectors, into registers; every phase and the
  final pass reuse it, so each element is read from memory once and written once.
* **contiguous, streaming** (rows too long to hold): each pass reads the row again.
* **strided** (reduced axis not innermost): threads take consecutive inner positions (so
  accesses coalesce) and split the reduced axis; partials meet in shared memory.

Rows of at most 1024 elements get one warp each (shuffles only, no block barrier); longer
rows get a block, with one ``__syncthreads()`` per phase (each reduction has its own shared
slots, so none is reused within a row).
"""

from __future__ import annotations

import re
from dataclasses import replace

from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.program import Reduction
from cuvil_dsl.passes import configs
from cuvil_dsl.passes.indexing import ROW_REDUCTIONS, operand_map

WARP_ROW_LIMIT = 1024  # longest row one warp takes
MAX_CLUSTER = 8  # blocks sharing one row (the portable thread-block cluster size)
CACHE_BUDGET = 64  # cached elements per thread (registers)
MAX_VEC = 8
_WARP_REDUCE = {"rsum": "cvl_warp_sum", "rmax": "cvl_warp_max", "rmin": "cvl_warp_min"}
FULL_THREADS = 2048  # resident threads per multiprocessor (sm_80, sm_90)
REGISTER_FILE = 65536  # 32-bit registers per multiprocessor

# Tuning of the contiguous row template, for A/B runs (benchmarks/ab_rows.py). Every key changes
# the generated source (which is the compile cache key), and the defaults below apply when a key
# is absent:
#   "threads": threads per row of a block-per-row kernel (rows over 1024 elements); a spec's
#              `block` override wins. Default: four 16-byte vectors of the row's narrowest data
#              type per thread, rounded to a power of two in [128, 1024] (f16 rows of 4096: 128
#              threads; layernorm 132.4 us against 139.3 us with 256; H200, benchmarks/ab_rows.py,
#              2026-11-29); when the row is the kernel's only row-varying input (a softmax), two
#              vectors per thread, at most 256 threads (softmax f16 [32768, 4096]: 131.5 and 131.6
#              us with 256 threads against 133.6 and 133.9 with 128, in one run, 2026-11-30). f32
#              rows of 4096 keep 256 either way (262.1 us; 128 threads 262.4).
#   "min_blocks": __launch_bounds__ minimum blocks per multiprocessor (a spec's launch_bounds
#              wins). Default: as many as the estimated registers allow, up to full occupancy.
#   "fast": row-level strength reductions (see ``_RowKernel.fast``). Default True.
#   "prefetch": load the final pass's row-varying operands (a norm's weight and bias) with the
#              row, before the first reduction. Default :data:`PREFETCH` (False since session 13: the
#              registers they hold cost occupancy, while the loads at the store hit in cache, as every row
#              reads the same weight and bias. layernorm f16 [131072, 1024]: 134.2 us against 151.5 with
#              them; [8192, 16384] 136.5 (and two blocks a multiprocessor) against 206.0; [32768, 4096]
#              133.3 against 132.9 / 133.3; H200, benchmarks/ab_rows.py).
#   "raw_cache": hold a cached row in its storage type (f16, bf16), converting each element where a
#              pass reads it, instead of converted to f32 once: half the registers (the conversion is
#              exact). Default :data:`RAW_CACHE`.
#   "warp_rows": rows of at most WARP_ROW_LIMIT elements (a warp a row): each warp takes this many
#              consecutive rows, the next row's loads in flight while it reduces the current one.
#              Default :data:`WARP_ROWS`.
#   "warp_block": threads a block of a warp-row kernel (a spec's `block` wins). Default: the config's.
#   "row_lanes": lanes a row of at most WARP_ROW_LIMIT elements takes (32, 16 or 8), so a warp holds
#              32 / lanes rows at once, each thread more of its row. Default :data:`ROW_LANES`.
TUNING: dict = {}
PREFETCH = False
RAW_CACHE = False
WARP_ROWS = 1
ROW_LANES = 32
# Short 16-bit rows (at most this many vectors a thread, a warp a row) are taken two a warp
# (SHORT_ROW_WARP_ROWS), the cache held as halves: each warp used to load its row, reduce it and leave,
# its loads in flight only before the first reduction. softmax f16 [262144, 512] (2 vectors a thread):
# 132.3 / 133.0 us against 134.3 / 135.0 in two calls of rotated rounds, and in `cuvil-dsl bench` 132.7
# against 134.9 (torch.compile 131.2 / 131.6 in the same runs); without the half cache (53 registers, 4
# blocks a multiprocessor) 142.1; 3 rows 133.8, 4 rows 133.0; 16 lanes a row 134.4. Longer rows gained
# nothing: layernorm f16 [131072, 1024] (4 vectors) 133.3 by default, 134.1 at 4 rows with halves, 156-158
# at 2 rows; f32 softmax rows of 1000 130.4 against 131.2 at 2 rows. A layernorm's rows of 512, whose final
# pass also loads the weight and bias, ran 9.8% slower two a warp (147.5 against 134.4), so the rule takes
# only rows whose final pass reads nothing else along the row. H200, session 16, benchmarks/ab_rows.py.
SHORT_ROW_SLOTS = 2
SHORT_ROW_WARP_ROWS = 2

MAX_NAN_HELPER = r"""
// max that propagates NaN in one instruction (sm_80+), as cvl_max does
__device__ __forceinline__ float cvl_max_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
"""
EXP_HELPER = r"""
// exp(x) for x <= 0 (softmax's exp(x - max)): one MUFU.EX2, a few ulp; results under 2^-126
// flush to zero, far below every tolerance of a value of at most 1
__device__ __forceinline__ float cvl_exp_le0(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.4426950408889634f));
    return r;
}
"""
CLUSTER_HELPERS = r"""
// sm_90 thread-block clusters: a barrier over the cluster's blocks (release/acquire), and a
// read of another block's shared memory (distributed shared memory).
__device__ __forceinline__ void cvl_cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;\n" ::: "memory");
}
__device__ __forceinline__ unsigned cvl_cluster_addr(const void* p, int rank) {
    unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}
__device__ __forceinline__ float cvl_cluster_load(const float* p, int rank) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cvl_cluster_addr(p, rank)) : "memory");
    return v;
}
__device__ __forceinline__ double cvl_cluster_load(const double* p, int rank) {
    double v;
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(cvl_cluster_addr(p, rank)) : "memory");
    return v;
}
__device__ __forceinline__ int cvl_cluster_load(const int* p, int rank) {
    int v;
    asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(cvl_cluster_addr(p, rank)) : "memory");
    return v;
}
"""



def _pow2_ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


class _RowKernel:
    def __init__(self, k: CudaKernel):
        p = k.p
        self.k, self.p = k, p
        self.a = p.row_axis
        self.L = p.domain[self.a]
        self.rows = element_count(p.domain[: self.a])
        self.inner = element_count(p.domain[self.a + 1:])
        self.acc: dict[str, str] = {}  # reduction out -> its result variable
        self.passes = [[r for r in p.reductions if r.phase == i] for i in range(p.phases)]
        # values that do not vary along the row are computed once per row, before the pass
        # that first needs them, by a walk of their own
        self.row_lines: list[str] = []
        self.row_walk = k.walk(self.row_lines.append, self.row_coord, None, None, lambda v, m: self.acc.get(v))
        # ``fast``: strength reductions that keep results well within the spec's tolerances:
        # softmax's exp(x - max(x)) (argument <= 0) by the MUFU exponential, e / sum(e) (sum >= 1)
        # by one reciprocal per row, a reduction's input reused by later passes kept in registers
        # (cached rows), rmax in one NaN-propagating instruction, and no rounding round trip
        # before a 16-bit store.
        self.fast = bool(TUNING.get("fast", True))
        self.fast_exp: set[str] = set()
        self.recip: dict[str, str] = {}  # div op -> the row sum it divides by
        self.inverse: dict[str, str] = {}  # row sum -> its per-row reciprocal
        self.carried: dict[tuple, tuple[int, str]] = {}  # (value, map) -> (pass computing it, array)
        self.prefetched: dict[tuple, str] = {}  # (buffer, map) -> raw array loaded with the row
        self.raw_cache = False  # cached 16-bit rows held in their storage type (TUNING "raw_cache")
        self.raw_held = False  # some cached row is held so (the note says "raw")
        self.lanes = 32  # lanes a row of a warp-row kernel (TUNING "row_lanes")
        self.helpers: list[str] = []
        # most blocks per SM that __launch_bounds__ may ask for: a softmax of 2 vectors a thread runs
        # slower at 8 (its 32-register cap: 134.4 us, f16 [32768, 4096], H200) than at 4 (131.4) or 1
        self.occupancy_cap = FULL_THREADS
        if self.fast:
            self.find_patterns()

    def f32_compute(self, value: str) -> bool:
        return self.k.lang.ctype(self.k.dtype(value)) == "float"

    def find_patterns(self) -> None:
        ops = self.p.ops
        for op in ops.values():
            if op.op != "exp" or not self.f32_compute(op.out):
                continue
            sub = ops.get(op.args[0])
            top = ops.get(sub.args[1]) if sub is not None and sub.op == "sub" else None
            if top is not None and top.op == "rmax" and top.args[0] == sub.args[0]:
                self.fast_exp.add(op.out)  # exp(x - max(x)): the argument is <= 0 (or NaN)
        for op in ops.values():
            if op.op == "div" and op.args[0] in self.fast_exp and self.f32_compute(op.out):
                total = ops.get(op.args[1])
                if total is not None and total.op == "rsum" and total.args[0] == op.args[0]:
                    self.recip[op.out] = op.args[1]  # e / sum(e): the sum is >= 1 (it holds exp(0))

    # ------------------------------------------------------------------ shared helpers
    def input_map(self, r: Reduction):
        op = r.op
        return operand_map(op, self.p.layout.maps[op.out], 0, self.p.types[op.args[0]].shape, self.a)

    def row_coord(self, d: int) -> str:
        assert d != self.a, "a per-row value depends on the position in the row"
        return "0" if d > self.a and self.inner == 1 else f"c{d}"

    def anchor(self, value: str, m) -> str | None:
        if value in self.acc:
            return self.acc[value]
        return self.row_walk.value(value, m) if self.a not in m else None

    def hoisted(self, lines: list[str]) -> list[str]:
        """The per-row values the pass just asked for, then the pass."""
        row, self.row_lines[:] = list(self.row_lines), []
        return row + lines

    def roots(self, pass_index: int | None) -> list:
        if pass_index is None:
            return [(s.value, s.map) for s in self.p.stores]
        return [(r.op.args[0], self.input_map(r)) for r in self.passes[pass_index]]

    def row_leaves(self, pass_index: int | None) -> list:
        """Buffers the pass reads that vary along the row."""
        dummy = {r.op.out: "r" for r in self.p.reductions}
        leaves = self.k.leaves(self.roots(pass_index), lambda v, m: dummy.get(v))
        return [(v, m) for v, m in leaves if self.a in m]

    def pass_walk(self, emit, coord, leaf, pass_index: int | None):
        """The point walk of one pass: row statistics and per-row values as anchors, values
        carried from earlier passes read from registers, and the ``fast`` rewrites."""
        k, ops, holder = self.k, self.p.ops, []

        def operand(op, m, i: int = 0) -> str:
            a = op.args[i]
            return holder[0].value(a, operand_map(op, m, i, self.p.types[a].shape, self.a))

        def bind(op, expr: str) -> str:
            name = k.fresh()
            emit(f"const float {name} = {k.lang.round(expr, k.dtype(op.out)) if rounds(op) else expr};")
            return name

        def anchor(value: str, m) -> str | None:
            found = self.anchor(value, m)
            if found is not None:
                return found
            carried = self.carried.get((value, tuple(m)))
            if carried is not None and (pass_index is None or carried[0] < pass_index):
                return f"{carried[1]}[s][e]"
            if value in self.fast_exp:
                self.helper(EXP_HELPER)
                return bind(ops[value], f"cvl_exp_le0({operand(ops[value], m)})")
            if value in self.recip:
                return bind(ops[value], f"({operand(ops[value], m)} * {self.inverse_of(self.recip[value])})")
            return None

        w = k.walk(emit, coord, None, leaf, anchor)
        holder.append(w)
        return w

    def inverse_of(self, total: str) -> str:
        """The per-row reciprocal of a row sum (computed once, before the pass that needs it)."""
        if total not in self.inverse:
            name = self.inverse[total] = f"inv_{self.acc_names[total]}"
            self.row_lines.append(f"const float {name} = 1.0f / {self.acc[total]};")
        return self.inverse[total]

    def helper(self, text: str) -> None:
        if text not in self.helpers:
            self.helpers.append(text)

    def combine(self, r: Reduction, acc: str, x: str) -> str:
        k = self.k
        if (self.fast and r.op.op == "rmax" and self.f32_compute(r.op.out)
                and configs.arch_number(k.arch) >= 80):
            self.helper(MAX_NAN_HELPER)
            return f"cvl_max_nan({acc}, {x})"
        return k.lang.apply(k.lang.combine[r.op.op], k.dtype(r.op.out), a=acc, b=x)

    def store_value(self, out: list[str], expr: str, value: str) -> str:
        """``expr`` to store as ``value``: a value rounded to its 16-bit dtype just before is
        stored from its unrounded form (the store rounds it the same way, once)."""
        return self.k.unrounded(out, expr, value) if self.fast else expr

    def body_of_pass(self, pass_index: int | None, coord, leaf) -> list[str]:
        """Per-element work of one pass: accumulate its reductions, or store (final pass)."""
        k, out = self.k, []
        w = self.pass_walk(out.append, coord, leaf, pass_index)
        if pass_index is None:
            for s in self.p.stores:
                out += k.store_lines(s, self.store_value(out, w.value(s.value, s.map), s.value), coord)
            return out
        for r in self.passes[pass_index]:
            x = w.value(r.op.args[0], self.input_map(r))
            acc = f"acc_{self.acc_names[r.op.out]}"
            out.append(f"{acc} = {self.combine(r, acc, x)};")
        for (v, m), (i, name) in self.carried.items():
            if i == pass_index:
                out.append(f"{name}[s][e] = {w.value(v, m)};")
        return out

    def needed_later(self, key: tuple, after: int) -> bool:
        """Does a pass after ``after`` (or the final pass) use ``key`` = (value, map)?"""
        dummy = {r.op.out: "r" for r in self.p.reductions}
        seen = []

        def anchor(v: str, m) -> str | None:
            if (v, tuple(m)) == key:
                seen.append(key)
                return "x"
            return dummy.get(v)

        roots = [x for j in range(after + 1, self.p.phases) for x in self.roots(j)] + self.roots(None)
        self.k.leaves(roots, anchor)
        return bool(seen)

    def open_accumulators(self, pass_index: int) -> list[str]:
        k = self.k
        return [f"{k.lang.ctype(k.dtype(r.op.out))} acc_{self.acc_names[r.op.out]} = "
                f"{k.lang.identity(r.op.op, k.dtype(r.op.out))};" for r in self.passes[pass_index]]

    def close(self, r: Reduction, combined: str) -> list[str]:
        """Bind the row's result, rounded to its dtype when it is a user-level value."""
        k = self.k
        dtype = k.dtype(r.op.out)
        name = f"r_{self.acc_names[r.op.out]}"
        value = k.lang.round(combined, dtype) if rounds(r.op) else combined
        self.acc[r.op.out] = name
        return [f"const {k.lang.ctype(dtype)} {name} = {value};"]

    def fold_lines(self, r: Reduction, name: str, count: int, item) -> list[str]:
        """``name`` = the in-order combine of ``item(i)`` for i < count, as a loop."""
        k = self.k
        step = k.lang.apply(k.lang.combine[r.op.op], k.dtype(r.op.out), a=name, b=item("i"))
        return [f"{k.lang.ctype(k.dtype(r.op.out))} {name} = {item('0')};",
                "#pragma unroll", f"for (int i = 1; i < {count}; ++i) {name} = {step};"]

    def coords(self, index: str, shape: tuple, first_axis: int, prefix: str = "c") -> list[str]:
        """Declarations of the coordinates of flat ``index`` over ``shape`` (axes from ``first_axis``)."""
        lines, inner = [], 1
        for j in reversed(range(len(shape))):
            d = first_axis + j
            div = f"{index} / {inner}" if inner > 1 else index
            lines.insert(0, f"const int {prefix}{d} = ({div}) % {shape[j]};" if j else f"const int {prefix}{d} = {div};")
            inner *= shape[j]
        return lines

    # ------------------------------------------------------------------ contiguous rows
    def render_contiguous(self, entry: str) -> Emitted:
        k, p = self.k, self.p
        self.acc_names = {r.op.out: str(i) for i, r in enumerate(p.reductions)}
        leaves_of = {i: self.row_leaves(i) for i in [*range(p.phases), None]}
        all_leaves = [x for leaves in leaves_of.values() for x in leaves]
        stores = [(s.value, s.map) for s in p.stores if self.a in s.map]
        vectorizable = [v for v, m in all_leaves + stores if k.contiguous_axis(v, m, self.a)]
        warp_mode = self.L <= WARP_ROW_LIMIT
        self.lanes = 32
        if warp_mode:
            # lanes a row: fewer than a warp's only when the row count keeps every warp's rows all in or
            # all out of range (the shuffles span the whole warp)
            lanes = int(TUNING.get("row_lanes", ROW_LANES))
            if lanes < 32 and 32 % lanes == 0 and self.rows % (32 // lanes) == 0:
                self.lanes = lanes
            threads = k.config.block
            if "block" not in k.config.overridden and TUNING.get("warp_block"):
                threads = int(TUNING["warp_block"])
            tpr = self.lanes
        else:
            if "block" in k.config.overridden:
                tpr = k.config.block
            else:
                # four 16-byte vectors of the narrowest row data per thread; two (at most 256
                # threads) when the row is the only row-varying input (see TUNING)
                per_vector = 16 // min((k.dtype(v).itemsize for v in vectorizable), default=4)
                if len({v for v, _m in all_leaves}) == 1:
                    default = min(256, max(128, _pow2_ceil(self.L // (2 * per_vector))))
                    if default * 2 * per_vector >= self.L:  # two vectors a thread (or fewer)
                        self.occupancy_cap = 4
                    # a row too long to cache at 256 threads: as many threads (up to 1024) as cache it,
                    # rather than reading it again in every pass (f16 rows of 32768: 512 threads,
                    # 169.7 us against 233.7 streamed, 180.8 at 1024; H200, session 13); a row that
                    # 1024 cannot cache either streams at the default, as before
                    candidates = [default << i for i in range(4) if default << i <= 1024]
                    default = next((t for t in candidates if -(-self.L // (t * per_vector)) * per_vector <= CACHE_BUDGET),
                                   default)
                else:
                    default = min(1024, max(128, _pow2_ceil(self.L // (4 * per_vector))))
                tpr = int(TUNING.get("threads") or default)
            threads = tpr
        vec = min(MAX_VEC, 16 // min(k.dtype(v).itemsize for v in vectorizable)) if vectorizable else 1
        while self.L % vec:
            vec //= 2
        nv = self.L // vec
        self.cluster = 1 if warp_mode else self.cluster_size(self.rows, threads * vec)
        tpr *= self.cluster  # the threads of every block of the cluster share the row
        slots = -(-nv // tpr)
        cached_leaves = list(dict.fromkeys(x for i in range(p.phases) for x in self.row_leaves(i)))
        cached = bool(cached_leaves) and len(cached_leaves) * slots * vec <= CACHE_BUDGET
        self.vec, self.tpr, self.nv, self.slots = vec, tpr, nv, slots
        # short 16-bit rows of one operand that the final pass reads alone (a softmax; a warp a row, at most
        # SHORT_ROW_SLOTS vectors a thread): two rows a warp, held as halves (see SHORT_ROW_SLOTS)
        short = (warp_mode and cached and slots <= SHORT_ROW_SLOTS and len(cached_leaves) == 1
                 and self.raw_eligible(cached_leaves[0])
                 and all(leaf in cached_leaves for leaf in leaves_of[None]))
        self.raw_cache = bool(TUNING.get("raw_cache", RAW_CACHE or short))
        if cached:
            self.plan_registers(cached_leaves)
        self.raw_held = cached and any(self.held_raw(leaf) for leaf in cached_leaves)
        min_blocks = self.occupancy(threads, cached_leaves if cached else [])
        per_warp = 1
        if warp_mode and cached and not self.prefetched:
            per_warp = int(TUNING.get("warp_rows", SHORT_ROW_WARP_ROWS if short else WARP_ROWS))

        body = []
        lanes, group = self.lanes, 32 // self.lanes  # a warp's rows at once
        if warp_mode and per_warp > 1:
            warps, span = threads // 32, per_warp * group
            sub = f" + threadIdx.x % 32 / {lanes}" if group > 1 else ""
            body += [f"const int tid = threadIdx.x % {lanes};",
                     f"const int first = (blockIdx.x * {warps} + threadIdx.x / 32) * {span}{sub};"]
            body += self.pipelined_rows(cached_leaves, per_warp, guard=self.rows % (warps * span) != 0)
            return self.finish(entry, body, threads, cached, min_blocks, grid=-(-self.rows // (warps * span)),
                               per_warp=per_warp)
        if warp_mode:
            rpb = threads // lanes
            body += [f"const int tid = threadIdx.x % {lanes};", f"const int row = blockIdx.x * {rpb} + threadIdx.x / {lanes};"]
            grid = -(-self.rows // rpb)
        elif self.cluster > 1:
            body += [f"const int tid = blockIdx.x % {self.cluster} * {threads} + threadIdx.x;",
                     f"const int row = blockIdx.x / {self.cluster};"]
            grid = self.rows * self.cluster
        else:
            body += ["const int tid = threadIdx.x;", "const int row = blockIdx.x;"]
            grid = self.rows
        inner_body = self.coords("row", p.domain[: self.a], 0)
        cache_names = {}
        if cached:
            for leaf in cached_leaves:
                cache_names[leaf] = k.fresh("c")
            inner_body += self.load_cache(cache_names)
        for i in range(p.phases):
            inner_body += self.open_accumulators(i)
            inner_body += self.hoisted(self.slot_loop(i, cached, cache_names))
            inner_body += self.reduce_across(i, warp_mode, threads)
        inner_body += self.hoisted(self.slot_loop(None, cached, cache_names))
        if warp_mode and self.rows % (threads // lanes):
            body += [f"if (row < {self.rows}) {{", *indent(inner_body), "}"]
        else:
            body += inner_body
        return self.finish(entry, body, threads, cached, min_blocks, grid=grid)

    def finish(self, entry: str, body: list[str], threads: int, cached: bool, min_blocks: int, grid: int,
               per_warp: int = 1) -> Emitted:
        """The kernel around ``body``, with the note that names its shape (tpr, vec, slots as planned)."""
        signature, helpers = self.clustered(self.k.signature(entry, threads), body)
        note = (f"// row template: {threads} threads, {self.tpr} per row, {self.vec}-element vectors, "
                f"{self.slots} per thread, "
                f"{'cached' if cached else 'streamed'}{' raw' if self.raw_held else ''}, "
                f"min {min_blocks} blocks/SM, fast {int(self.fast)}, "
                f"carried {len(self.carried)}, prefetched {len(self.prefetched)}"
                f"{f', {per_warp} rows a warp' if per_warp > 1 else ''}")
        lines = [note, *signature, *indent(body), "}"]
        return Emitted(lines, (grid, 1, 1), (threads, 1, 1), helpers="".join([helpers, *self.helpers]))

    def pipelined_rows(self, cached_leaves: list, per_warp: int, guard: bool) -> list[str]:
        """A warp's ``per_warp`` consecutive rows (from ``first``), each row's cached data loaded
        while the warp still reduces the row before: two sets of cache registers, the second
        renamed into the first as the unrolled loop moves on."""
        k, p = self.k, self.p
        current = {leaf: k.fresh("c") for leaf in cached_leaves}
        upcoming = {leaf: k.fresh("n") for leaf in cached_leaves}
        group = 32 // self.lanes  # rows a warp holds at once, ``group`` apart in the warp's run
        lead = self.coords("first", p.domain[: self.a], 0)
        loop = [f"const int row = first + rr{f' * {group}' if group > 1 else ''};"]
        if guard:
            loop.append(f"if (row >= {self.rows}) break;")
        loop += self.coords("row", p.domain[: self.a], 0)
        ahead = self.coords(f"(row + {group})", p.domain[: self.a], 0)
        condition = f"rr + 1 < {per_warp}" + (f" && row + {group} < {self.rows}" if guard else "")
        loop += [f"if ({condition}) {{  // the next row's loads, in flight during this row's reductions",
                 *indent(ahead + self.cache_loads(upcoming)), "}"]
        for i in range(p.phases):
            loop += self.open_accumulators(i)
            loop += self.hoisted(self.slot_loop(i, True, current))
            loop += self.reduce_across(i, True, 32)
        loop += self.hoisted(self.slot_loop(None, True, current))
        renames = [f"{current[leaf]}[s][e] = {upcoming[leaf]}[s][e];" for leaf in cached_leaves]
        loop += [f"if (rr + 1 < {per_warp}) {{",
                 *indent(["#pragma unroll", f"for (int s = 0; s < {self.slots}; ++s)", *indent(self.e_loop(renames))]),
                 "}"]
        out = self.cache_decl(current) + self.cache_decl(upcoming) + self.carried_decl()
        out += ["{", *indent(lead + self.cache_loads(current)), "}"]
        out += ["#pragma unroll", f"for (int rr = 0; rr < {per_warp}; ++rr) {{", *indent(loop), "}"]
        if guard:
            return [f"if (first < {self.rows}) {{", *indent(out), "}"]
        return out

    def plan_registers(self, cached_leaves: list) -> None:
        """Cached rows: which reduction inputs later passes reuse (kept instead of recomputed),
        and which final-pass operands are loaded with the row."""
        k, p, per = self.k, self.p, self.slots * self.vec
        room = CACHE_BUDGET - len(cached_leaves) * per
        if self.fast:
            for i in range(p.phases):
                for r in self.passes[i]:
                    key = (r.op.args[0], tuple(self.input_map(r)))
                    op = p.ops.get(key[0])
                    if (op is None or op.op in ROW_REDUCTIONS or self.a not in key[1] or key in self.carried
                            or room < per or not self.needed_later(key, i)):
                        continue
                    self.carried[key] = (i, k.fresh("keep"))
                    room -= per
        if self.vec == 1:
            return
        # the final pass's leaves, walked whether or not they are prefetched: the walk draws fresh
        # names, so a kernel with nothing to prefetch renders the same source either way
        final = self.row_leaves(None)
        if TUNING.get("prefetch", PREFETCH):
            for v, m in final:
                key = (v, tuple(m))
                words = per * k.dtype(v).itemsize // 4
                if key in self.prefetched or key in cached_leaves or not k.contiguous_axis(v, m, self.a):
                    continue
                if words > room:
                    break
                self.prefetched[key] = k.fresh("pre")
                room -= words

    def occupancy(self, threads: int, cached_leaves: list) -> int:
        """Minimum resident blocks per multiprocessor for __launch_bounds__ (also set on the
        config). Block-per-row kernels with vectorised rows, at most two statistics and one
        store get as many as the estimated registers allow (up to full occupancy); others keep
        one and let ptxas choose (an estimate that is too low spills)."""
        k = self.k
        if "launch_bounds" in k.config.overridden:
            return k.config.min_blocks or 1
        if "min_blocks" in TUNING:
            chosen = int(TUNING["min_blocks"])
        elif (self.L <= WARP_ROW_LIMIT or self.vec == 1 or len(self.p.reductions) > 2 or len(self.p.stores) > 1
              or not cached_leaves):
            chosen = 1
        else:
            per = self.slots * self.vec
            cached = sum(-(-per * k.dtype(v).itemsize // 4) if self.held_raw((v, m)) else per * max(1, k.dtype(v).itemsize // 4)
                         for v, m in cached_leaves)
            carried = sum(per * max(1, k.dtype(v).itemsize // 4) for v, m in self.carried)
            # the final pass's other row operands, counted as if held with the row (prefetched or not:
            # at fewer registers these kernels ran slower, e.g. layernorm f16 [32768, 4096] at 8 blocks
            # and 64 registers 135.2 us against 132.5 at 6 blocks; H200, session 13)
            final = [x for x in dict.fromkeys(self.row_leaves(None)) if x not in cached_leaves]
            words = max(cached, carried) + sum(-(-per * k.dtype(v).itemsize // 4) for v, m in final)
            estimate = 8 * -(-(words + 16) // 8)  # live row data plus addressing and statistics
            chosen = max(1, min(FULL_THREADS // threads, REGISTER_FILE // (threads * estimate), self.occupancy_cap))
            # one block of 512 threads alone on a multiprocessor runs its loads, block reductions and
            # stores in turn; a second block overlaps them. Ask for two when their 64 registers a thread
            # hold the row's cached data and 16 more (the final pass's operands, not prefetched, come a
            # vector at a time): layernorm f16 [8192, 16384] 135.6 us at 2 blocks of 512, 64 registers,
            # against 205.1. (Two blocks of 1024 would leave 32 registers: f32 layernorm rows of 16384
            # spill there.)
            if (chosen == 1 and threads == 512 and not self.prefetched
                    and REGISTER_FILE // (2 * threads) >= max(cached, carried) + 16):
                chosen = 2
        k.config = replace(k.config, min_blocks=chosen)
        return chosen

    def cluster_size(self, blocks: int, per_block: int) -> int:
        """Blocks per row on sm_90+: enough to fill the machine when rows are few and long
        (each block keeping at least two steps of ``per_block`` elements of the row)."""
        if configs.arch_number(self.k.arch) < 90:
            return 1
        size = 1
        while size < MAX_CLUSTER and blocks * size * 2 <= self.k.sm_count and self.L >= 2 * size * 2 * per_block:
            size *= 2
        return size

    def clustered(self, signature: list[str], body: list[str]) -> tuple[list[str], str]:
        """Mark the kernel as launched in clusters; no block leaves while another may still
        read its shared memory."""
        if self.cluster == 1:
            return signature, ""
        body.append("cvl_cluster_sync();")
        first = signature[0].replace("__global__ void", f"__global__ void __cluster_dims__({self.cluster}, 1, 1)")
        return [first, *signature[1:]], CLUSTER_HELPERS

    def coord_contiguous(self, col: str):
        return lambda d: col if d == self.a else ("0" if d > self.a else f"c{d}")

    def raw_eligible(self, leaf: tuple) -> bool:
        """Can the cached ``leaf`` be held in its storage type (a 16-bit type loaded by vectors)?"""
        k, (v, m) = self.k, leaf
        return (self.vec > 1 and k.contiguous_axis(v, m, self.a)
                and k.dtype(v).itemsize < 4 and k.lang.ctype(k.dtype(v)) == "float")

    def held_raw(self, leaf: tuple) -> bool:
        """Is the cached ``leaf`` held in its storage type?"""
        return self.raw_cache and self.raw_eligible(leaf)

    def cache_decl(self, names: dict) -> list[str]:
        k, vec = self.k, self.vec
        return [f"__align__(16) {k.storage(v)} {n}[{self.slots}][{vec}];" if self.held_raw((v, m))
                else f"{k.lang.ctype(k.dtype(v))} {n}[{self.slots}][{vec}];" for (v, m), n in names.items()]

    def carried_decl(self) -> list[str]:
        k, vec = self.k, self.vec
        return [f"{k.lang.ctype(k.dtype(v))} {n}[{self.slots}][{vec}];" for (v, m), (i, n) in self.carried.items()]

    def load_cache(self, names: dict) -> list[str]:
        k, vec = self.k, self.vec
        decl = self.cache_decl(names)
        decl += [f"__align__(16) {k.storage(v)} {n}[{self.slots}][{vec}];" for (v, m), n in self.prefetched.items()]
        decl += self.carried_decl()
        inner = []
        for (v, m), n in self.prefetched.items():
            off = k.offset(v, m, self.coord_contiguous(f"sv * {vec}"))
            inner.append(f"cvl_copy_vec<{k.storage(v)}, {vec}>({n}[s], {k.names[v]} + {off});")
        return decl + self.cache_loads(names, inner)

    def cache_loads(self, names: dict, inner: list[str] | None = None) -> list[str]:
        """The loads of the thread's slots of the cached row data (from the row's coordinates)."""
        k, vec = self.k, self.vec
        inner = list(inner or [])
        for (v, m), n in names.items():
            if self.held_raw((v, m)):
                off = k.offset(v, m, self.coord_contiguous(f"sv * {vec}"))
                inner.append(f"cvl_copy_vec<{k.storage(v)}, {vec}>({n}[s], {k.names[v]} + {off});")
            elif vec > 1 and k.contiguous_axis(v, m, self.a):
                raw = k.fresh("raw")
                off = k.offset(v, m, self.coord_contiguous(f"sv * {vec}"))
                inner += [f"__align__(16) {k.storage(v)} {raw}[{vec}];",
                          f"cvl_copy_vec<{k.storage(v)}, {vec}>({raw}, {k.names[v]} + {off});",
                          *self.e_loop([f"{n}[s][e] = {k.lang.load(f'{raw}[e]', k.dtype(v))};"])]
            else:
                inner += self.e_loop([f"{n}[s][e] = {k.load(v, m, self.coord_contiguous(self.col()))};"])
        return self.unrolled_slots(inner)

    def col(self) -> str:
        return f"(sv * {self.vec} + e)" if self.vec > 1 else "sv"

    def e_loop(self, lines: list[str]) -> list[str]:
        if self.vec == 1:
            return ["{", "    const int e = 0;", *indent(lines), "}"]
        return ["#pragma unroll", f"for (int e = 0; e < {self.vec}; ++e) {{", *indent(lines), "}"]

    def unrolled_slots(self, inner: list[str]) -> list[str]:
        guard = self.nv % self.tpr != 0
        body = [f"const int sv = s * {self.tpr} + tid;"]
        body += [f"if (sv < {self.nv}) {{", *indent(inner), "}"] if guard else inner
        return ["#pragma unroll", f"for (int s = 0; s < {self.slots}; ++s) {{", *indent(body), "}"]

    def slot_loop(self, pass_index: int | None, cached: bool, cache_names: dict) -> list[str]:
        """One pass over the thread's part of the row, vector slot by vector slot."""
        k, vec = self.k, self.vec
        loaded: dict = {}
        pre: list[str] = []
        for v, m in self.row_leaves(pass_index):
            if ((v, m) in cache_names or (v, m) in loaded or (v, m) in self.prefetched
                    or not (vec > 1 and k.contiguous_axis(v, m, self.a))):
                continue
            raw = loaded[(v, m)] = k.fresh("raw")
            off = k.offset(v, m, self.coord_contiguous(f"sv * {vec}"))
            pre += [f"__align__(16) {k.storage(v)} {raw}[{vec}];",
                    f"cvl_copy_vec<{k.storage(v)}, {vec}>({raw}, {k.names[v]} + {off});"]

        def leaf(value: str, m) -> str | None:
            if (value, tuple(m)) in cache_names:
                held = f"{cache_names[(value, tuple(m))]}[s][e]"
                return k.lang.load(held, k.dtype(value)) if self.held_raw((value, tuple(m))) else held
            if (value, tuple(m)) in loaded:
                return k.lang.load(f"{loaded[(value, tuple(m))]}[e]", k.dtype(value))
            if (value, tuple(m)) in self.prefetched:
                return k.lang.load(f"{self.prefetched[(value, tuple(m))]}[s][e]", k.dtype(value))
            return None

        staged, post = {}, []
        if pass_index is None:
            for s in self.p.stores:
                if vec > 1 and k.contiguous_axis(s.value, s.map, self.a):
                    staged[s.value] = k.fresh("out")
                    pre.append(f"__align__(16) {k.storage(s.value)} {staged[s.value]}[{vec}];")
                    off = k.offset(s.value, s.map, self.coord_contiguous(f"sv * {vec}"))
                    post.append(f"cvl_copy_vec<{k.storage(s.value)}, {vec}>({k.names[s.value]} + {off}, "
                                f"{staged[s.value]});")
        work = self.pass_body(pass_index, leaf, staged)
        uses_col = any(re.search(r"\bcol\b", line) for line in work)
        body = ([f"const int col = {self.col()};"] if uses_col else []) + work
        inner = pre + self.e_loop(body) + post
        if cached:
            return self.unrolled_slots(inner)
        return [f"for (int sv = tid; sv < {self.nv}; sv += {self.tpr}) {{", *indent(inner), "}"]

    def pass_body(self, pass_index: int | None, leaf, staged: dict) -> list[str]:
        k = self.k
        coord = self.coord_contiguous("col")
        if pass_index is not None or not staged:
            return self.body_of_pass(pass_index, coord, leaf)
        out: list[str] = []
        w = self.pass_walk(out.append, coord, leaf, pass_index)
        for s in self.p.stores:
            expr = self.store_value(out, w.value(s.value, s.map), s.value)
            if s.value in staged:
                out.append(f"{staged[s.value]}[e] = {k.lang.store(expr, k.dtype(s.value))};")
            else:
                out += k.store_lines(s, expr, coord)
        return out

    def reduce_across(self, pass_index: int, warp_mode: bool, threads: int) -> list[str]:
        k = self.k
        reds = self.passes[pass_index]
        out = []
        if warp_mode:
            for r in reds:
                out += self.close(r, f"{_WARP_REDUCE[r.op.op]}(acc_{self.acc_names[r.op.out]}, {self.lanes})")
            return out
        warps = threads // 32
        for r in reds:
            n = self.acc_names[r.op.out]
            out += [f"__shared__ {k.lang.ctype(k.dtype(r.op.out))} red_{n}[{warps}];",
                    f"acc_{n} = {_WARP_REDUCE[r.op.op]}(acc_{n}, 32);",
                    f"if (threadIdx.x % 32 == 0) red_{n}[threadIdx.x / 32] = acc_{n};"]
        out.append("__syncthreads();")
        for r in reds:
            n = self.acc_names[r.op.out]
            out += self.fold_lines(r, f"block_{n}", warps, lambda i: f"red_{n}[{i}]")
            if self.cluster == 1:
                out += self.close(r, f"block_{n}")
                continue
            ctype = k.lang.ctype(k.dtype(r.op.out))
            out += [f"__shared__ {ctype} part_{n};", f"if (threadIdx.x == 0) part_{n} = block_{n};"]
        if self.cluster == 1:
            return out
        out.append("cvl_cluster_sync();")
        for r in reds:
            n = self.acc_names[r.op.out]
            # every block combines the blocks' partials in rank order: the same bits everywhere
            out += self.fold_lines(r, f"cluster_{n}", self.cluster, lambda i: f"cvl_cluster_load(&part_{n}, {i})")
            out += self.close(r, f"cluster_{n}")
        return out

    # ------------------------------------------------------------------ strided rows
    def render_strided(self, entry: str) -> Emitted:
        k, p = self.k, self.p
        self.acc_names = {r.op.out: str(i) for i, r in enumerate(p.reductions)}
        threads = k.config.block
        tx = min(32, _pow2_ceil(self.inner))
        by = threads // tx
        chunks = -(-self.inner // tx)
        self.cluster = self.cluster_size(chunks * self.rows, by)
        span = by * self.cluster  # threads down the reduced axis, over the cluster's blocks
        body = [f"const int tx = threadIdx.x % {tx};",
                f"const int ty = threadIdx.x / {tx}" + (f" + blockIdx.x % {self.cluster} * {by};" if self.cluster > 1 else ";"),
                f"const int chunk = blockIdx.x / {self.cluster} % {chunks};",
                f"const int orow = blockIdx.x / {self.cluster * chunks};",
                f"const int inner = chunk * {tx} + tx;"]
        body += self.coords("orow", p.domain[: self.a], 0)
        body += self.coords("inner", p.domain[self.a + 1:], self.a + 1)
        guard = self.inner % tx != 0

        def coord(d: int) -> str:
            return "l" if d == self.a else f"c{d}"

        def loop(inner: list[str]) -> list[str]:
            lines = [f"for (int l = ty; l < {self.L}; l += {span}) {{", *indent(inner), "}"]
            return [f"if (inner < {self.inner}) {{", *indent(lines), "}"] if guard else lines

        for i in range(p.phases):
            body += self.open_accumulators(i)
            body += self.hoisted(loop(self.body_of_pass(i, coord, None)))
            for r in self.passes[i]:
                n = self.acc_names[r.op.out]
                body += [f"__shared__ {k.lang.ctype(k.dtype(r.op.out))} red_{n}[{by}][{tx}];",
                         f"red_{n}[threadIdx.x / {tx}][tx] = acc_{n};"]
            body.append("__syncthreads();")
            for r in self.passes[i]:
                body += self.combine_strided(r, by, tx)
            if self.cluster > 1:
                body.append("cvl_cluster_sync();")
                for r in self.passes[i]:
                    n = self.acc_names[r.op.out]
                    body += self.fold_lines(r, f"cluster_{n}", self.cluster, lambda c: f"cvl_cluster_load(&part_{n}[tx], {c})")
                    body += self.close(r, f"cluster_{n}")
        body += self.hoisted(loop(self.body_of_pass(None, coord, None)))
        signature, helpers = self.clustered(k.signature(entry, threads), body)
        lines = [*signature, *indent(body), "}"]
        return Emitted(lines, (chunks * self.rows * self.cluster, 1, 1), (threads, 1, 1),
                       helpers="".join([helpers, *self.helpers]))

    def combine_strided(self, r: Reduction, by: int, tx: int) -> list[str]:
        """The block's partial for this thread's column; in a cluster, published for the others."""
        k = self.k
        n = self.acc_names[r.op.out]
        out = self.fold_lines(r, f"block_{n}", by, lambda y: f"red_{n}[{y}][tx]")
        if self.cluster == 1:
            return out + self.close(r, f"block_{n}")
        return out + [f"__shared__ {k.lang.ctype(k.dtype(r.op.out))} part_{n}[{tx}];",
                      f"if (threadIdx.x < {tx}) part_{n}[tx] = block_{n};"]


def render(k: CudaKernel, entry: str) -> Emitted:
    rk = _RowKernel(k)
    return rk.render_strided(entry) if rk.inner > 1 else rk.render_contiguous(entry)
