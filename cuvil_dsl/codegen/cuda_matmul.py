"""GEMM kernels: ``@`` with its epilogue, and ``@`` followed by a row softmax in one kernel.

**matmul**: one block per BM x BN output tile (and batch index, decoded from a 1-D grid);
the engine's k loop fills the accumulators, then every accumulator element runs the fused
epilogue (bias, activation, scale, casts, masks: any elementwise chain) and is stored.

**matmul_softmax**: one block per BM-row band of the output (and batch index). Each warp keeps
running statistics for the columns it computes; warps that share rows merge theirs once, at
the end of the statistics pass. The block walks every column tile twice, one flat sequence of
k steps:

* pass 0 (statistics): per column tile, the pre-softmax value ``s`` (the GEMM plus its
  epilogue, masked past N) and an online row maximum and sum of ``exp(s - max)``;
* pass 1 (write): the GEMM tile again (cheap when K is a head dimension), then
  ``exp(s - max) / sum`` (``s - max - log(sum)`` for log_softmax), the elementwise work after
  it, and the stores. The logits never reach memory.

**matmul_softmax, row band** (16-bit operands, K of at most 128; :data:`ROW_BAND` turns it off):
the same two passes, but each warp owns 16 (or 32) rows and every column, so a row's statistics
never leave its warp. The block's A band is loaded once, into registers (ldmatrix fragments);
only B tiles stream through the cp.async pipeline, one k step (all of K) per column tile. Each
thread keeps a running maximum and sum for its own columns (the sum is rescaled only when the
maximum grows); the four lanes of a row merge theirs once, after the last column tile, with the
same log-sum-exp rule. ``exp(s - max)`` is ``ex2.approx(fma(s, log2(e), -b))`` with ``b`` the
rounded ``max * log2(e)`` (relative error below 2^-21; the rounding of ``b`` is one factor
common to a row's numerators and its sum, so it cancels, and log_softmax subtracts it), and the
write pass multiplies by the row's reciprocal sum instead of dividing (one more rounding of the
f32 result, 2^-24 relative): both far inside the tolerance of any f16/bf16 result and of f32.
When the kernel stores one 16-bit tensor contiguous along N, each warp stages its output tile
in shared memory (the A band's space, free once the fragments are in registers) and writes it
with coalesced, streaming 16-byte stores. Rows past M and columns past N are masked as in the
generic template.

NaN in a row makes the whole row NaN, as NumPy does; a row whose values are all ``-inf`` gives
NaN too (0 / 0), also as NumPy does. A column tile that is all ``-inf`` (a masked block) adds
nothing and leaves the running maximum unscaled.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cuvil_dsl.codegen import cuda_wgmma
from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.cuda_gemm import MmaEngine, batch_offset, engine, operand
from cuvil_dsl.codegen.cuda_lang import STORAGE
from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.passes import configs
from cuvil_dsl.types import DType

# Render 16-bit GEMM + softmax kernels with a short K as row bands (see the module docstring);
# False keeps every GEMM + softmax on the generic template (benchmarks/ab_attention.py compares).
ROW_BAND = True
# Which engine runs a row band on sm_90 when the band suits wgmma (16-bit K-major operands, K <= 64,
# one 16-bit output contiguous along N; _GemmKernel.band_wgmma_operands), by the shape of its grid
# (row_band_engine). benchmarks/ab_attention.py --sweep times each engine at 9 sizes; on the H200
# (2026-11-30) these rules pick the fastest, or one within 2% of it, at every one of them:
# * a softmax with N <= 2048 runs in one pass on a cluster of CTAs (cuda_band_cluster): with the
#   statistics exchange lagging a band (persistent clusters) when a cluster has at least
#   LAGGED_CLUSTER_CTAS CTAs (N > 768); else with a cluster barrier, while its grid is at most
#   CLUSTER_CTAS_PER_SM CTAs a multiprocessor (CLUSTER_CTAS_PER_SM_NO_WGMMA when the wgmma band
#   does not apply);
# * the two-pass band on wgmma (render_band_wgmma) needs WGMMA_BANDS_PER_SM 128-row bands a
#   multiprocessor (at one a multiprocessor it ties with mma.sync, below it loses: 49.2 against
#   37.6 us for [4, 2048, 2048]);
# * else the mma.sync band (render_band), the band everywhere before sm_90.
# ROW_BAND_TUNING "mma", "wgmma" or "cluster" forces one engine (A/B runs).
LAGGED_CLUSTER_CTAS = 4
# Persistent clusters of the lagged band: this share of those that fit at once by the arch's SM count
# (cuda.SM_COUNT), and the loader launches no more than the driver says run at once
# (runtime/clusters.py: cuOccupancyMaxActiveClusters). H200, attention_f16, session 4: 0.9 (44 clusters
# of 8) 135.8 us; 0.8 152.1; 0.6 156.7; 0.95 (46, before the loader's clamp) 199.7, past the clusters the
# GPU runs at once (a second wave). 1.0 renders 49 and the loader launches the 45 that run at once: in
# nine paired A/B runs (sessions 8-9, ab_attention "lagged at 1.0, clamped by the loader") about 0.4%
# faster than 0.9's 44 on average (-0.8 to +1.5 us: the size of the noise between identical rows). 1.0
# since session 9: every cluster that runs at once, as the driver says, whatever the part.
LAGGED_FILL = 1.0
CLUSTER_CTAS_PER_SM = 8.0
CLUSTER_CTAS_PER_SM_NO_WGMMA = 16.0
WGMMA_BANDS_PER_SM = 1.5
# ROW_BAND_TUNING keys that tune the mma.sync band only (and so ask for it)
MMA_ONLY_TUNING = frozenset({"mma", "poly", "stsm", "overlap", "tile", "min_blocks", "stream"})
# 16-bit storage -> (its pair type, the intrinsic joining two rounded halves into one)
PAIR = {DType.F16: ("__half2", "__halves2half2"), DType.BF16: ("__nv_bfloat162", "__halves2bfloat162")}
SPLIT_CLUSTER_HELPERS = r"""
// split-K in a cluster: the float4 at shared address `local` of the cluster's CTA `rank`
__device__ __forceinline__ float4 cvl_ld_peer4(unsigned local, unsigned rank) {
    unsigned remote;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
    return v;
}
__device__ __forceinline__ void cvl_split_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
"""
LOG2E = "1.4426950408889634f"
BAND_HELPERS = r"""
// 2^x by the MUFU (relative error below 2^-21; -inf -> 0, NaN -> NaN); subnormal results flush to 0.
__device__ __forceinline__ float cvl_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
"""
# 2^x on the FMA pipe (ROW_BAND_TUNING "poly"), as FlashAttention-3 moves part of its exps off the MUFU.
# Cody-Waite: j = round(x) by the 1.5 * 2^23 addition (exact for |x| < 2^22), f = x - j in [-0.5, 0.5]
# exactly, 2^f by a degree-5 polynomial with constant term 1, fitted for minimax relative error (Horner,
# 5 FMAs; 9.2e-8 in exact arithmetic), times 2^j built from t's low bits: relative error below 2^-22
# (1.7e-7, the largest over 3 M sampled points of [-126, 0.3] in f32 with the rounding of each step;
# tests/codegen/test_row_band.py emulates it), below MUFU ex2.approx's 2^-21.
# x is clamped to -127 first by max.NaN (NaN stays NaN): j = -127 makes the scale's bits 0, so every
# x < -126.5 (and -inf) gives exactly +0, like ex2.approx.ftz; [-126.5, -126) gives a subnormal (0 under ftz).
# Valid for x < 128 (the row band's arguments are x - max <= 0 up to rounding). 11 instructions
# (FMNMX, 3 FADD, 5 FFMA, an integer shift-add, FMUL) against one MUFU.EX2 issue and 8 cycles of its pipe.
BAND_POLY_HELPER = r"""
__device__ __forceinline__ float cvl_ex2_fma(float x) {
    float xc;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(xc) : "f"(x), "f"(-127.0f));
    const float t = __fadd_rn(xc, 12582912.0f);  // round(xc) in the low mantissa bits
    const float j = __fsub_rn(t, 12582912.0f);
    const float f = __fsub_rn(xc, j);  // exact, in [-0.5, 0.5]
    float p = 1.326471334e-03f;
    p = fmaf(p, f, 9.671511129e-03f);
    p = fmaf(p, f, 5.550733581e-02f);
    p = fmaf(p, f, 2.402224243e-01f);
    p = fmaf(p, f, 6.931470037e-01f);
    p = fmaf(p, f, 1.0f);  // 2^0 = 1 exactly
    // t's bits are 0x4B400000 + j: shifted left by 23 they are j << 23 (the high bits drop out)
    const float scale = __int_as_float((__float_as_int(t) << 23) + 0x3F800000);  // 2^j; +0 for j = -127
    return __fmul_rn(p, scale);  // NaN in, NaN out (p is NaN)
}
"""
STSM_PACK = r"""
template <typename T> __device__ __forceinline__ unsigned cvl_pack_bits(T v) {
    return *reinterpret_cast<unsigned*>(&v);  // a __half2 / __nv_bfloat162 as its 32 bits
}
"""
BAND_STREAM_HELPER = r"""
// cp.async of 16 bytes to a shared address, no zero fill (the row band's unguarded B tiles)
__device__ __forceinline__ void cvl_cp_async16_at(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cvl_ldsm_x4_at(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
"""
# Tuning of the row-band template, for A/B runs (benchmarks/ab_attention.py). Every key changes the
# generated source (the compile cache key); defaults apply when a key is absent:
#   "fold": when the softmax's argument is the unrounded GEMM value times a uniform (or the GEMM value
#           itself) and no column is masked: the statistics pass takes the maximum of the raw
#           accumulators (of their negations when the uniform is negative) and scales it once, both
#           passes take exp as one ``fma(acc, u * log2(e), -base)``, and for a 16-bit softmax the
#           write pass adds ``log2(sum)`` to the base instead of multiplying by ``1 / sum``
#           (relative error below 2^-24 * |max * log2(e)| * ln 2: 5e-6 for logits up to 64).
#           Default True.
#   "stream": B tiles loaded through per-thread pointers and shared addresses advanced per tile (no
#           bounds tests when the tiles divide N and K is a multiple of 16), and the staged
#           stores through one row pointer per tile. Default True.
#   "tile": (rows per block, columns per tile, threads) instead of the ladder (a spec's tile wins).
#   "min_blocks": __launch_bounds__ minimum blocks per multiprocessor (a spec's launch_bounds wins).
#   "overlap": two accumulator sets, the next column tile's mma issued before the current tile's
#           statistics or output (software pipelining across tiles; twice the accumulator registers).
#           Default False.
#   "stsm": the write pass stages its output tile with stmatrix.x4 (sm_90+) instead of 4-byte stores.
#           Default False.
#   "poly": (statistics, write): in eighths, the share of each pass's per-element exps taken by
#           ``cvl_ex2_fma`` (the FMA pipe) instead of the MUFU: elements whose index (ni * 2 + q) % 8 is
#           below the number (spread over the tile so both pipes stay busy). Default (0, 0).
#   "mma": True: the mma.sync band wherever a band applies (see CLUSTER_CTAS_PER_SM); so do the
#           keys above that tune it (MMA_ONLY_TUNING).
#   "wgmma": (BN, stages, min_blocks): the two-pass band on wgmma where it applies.
#   "cluster": (warpgroups a CTA, min_blocks, fill, lag, store_scaled, spread, stcs): the one-pass band
#           on a cluster of CTAs where it applies (see cuda_band_cluster.render; every element may be
#           left out from the right).
#   "lazy", "quad_merge", "prefetch", "interleave": True / False: the lagged cluster band's lazy bases, its
#           exchange split across a row's four lanes, its loads a band ahead and its write pieces among
#           the next tiles' exps (cuda_band_cluster.LAZY, QUAD_MERGE, PREFETCH, INTERLEAVE; all on by
#           default).
#   "cluster_tiles", "cluster_max": the cluster bands' column tiles of 64 a CTA (at most
#           cuda_band_cluster.MAX_TILES, 4) and CTAs a cluster (up to 16, non-portable: the loader opts the
#           kernel in). Session 17: 2 tiles in clusters of 16 fit 4 CTAs a multiprocessor and ran 35% slower on
#           attention_f16; on small grids 0.1-0.6 us faster at the smallest only (benchmarks/NOTES.md).
#   "ablate": names of parts the lagged band leaves out, for timing only (its results are then wrong):
#           "store" (the output's stores), "stage" (the numerators' stmatrix staging), "sts" (shared
#           stores instead of global ones), "store_l2" (stores kept within the output's first 4 MB),
#           "lds" (stores of constants instead of the staged numerators), "exp" (the numerators' exp2,
#           an FFMA instead).
ROW_BAND_TUNING: dict = {}


class _GemmKernel:
    def __init__(self, k: CudaKernel):
        p = k.p
        self.k, self.p = k, p
        self.matmul = k.kernel.anchor
        self.softmax = next((op for op in p.ops.values() if op.op in ("softmax", "log_softmax")), None)
        self.a, self.b = operand(k, self.matmul, 0), operand(k, self.matmul, 1)
        self.M, self.N = p.domain[-2], p.domain[-1]
        self.batch = element_count(p.domain[:-2])
        kind = "matmul_softmax" if self.softmax is not None else "matmul"
        tensor_cores = configs.uses_tensor_cores(self.a.dtype, k.arch, k.tf32)
        band = None
        if ROW_BAND and self.softmax is not None and tensor_cores and self.a.dtype.itemsize == 2:
            tuned = _band_tuned(k.config)
            # 64-row warps only for A/B tiles (their min_blocks set the registers), never a spec's tile
            ab_tile = "tile" in ROW_BAND_TUNING and not set(k.config.overridden) & {"tile", "block"}
            rows = (16, 32, 64) if ab_tile else (16, 32)
            band = configs.row_band_config(tuned, self.a.depth, self.a.k_major, self.b.k_major,
                                           k.arch, lambda bm: self.batch * -(-self.M // bm), k.sm_count, rows)
        self.band = band is not None
        if band is not None:
            k.config, stages = band
            self.eng = eng = MmaEngine(k, self.a, self.b)
            warps = k.config.block // 32
            eng.w = configs.WarpLayout(warps, 1, k.config.tile_m // warps, k.config.tile_n)
            eng.mi, eng.ni = eng.w.warp_m // 16, eng.w.warp_n // 8
            eng.slots, eng.warps_n, eng.stages = eng.mi * 2, 1, stages
        else:
            wgmma = cuda_wgmma.plain_engine(k, self.a, self.b, self.blocks) if self.softmax is None else None
            if wgmma is not None:  # Hopper: sm_90a's wgmma (see cuda_wgmma.plain_engine for the rule)
                k.config = replace(k.config, tile_m=wgmma.bm, tile_n=wgmma.bn, tile_k=wgmma.bk,
                                   block=wgmma.threads + (128 if wgmma.specialised else 0))
                if cuda_wgmma.tma_loads(self.a, self.b, p.domain):
                    wgmma.use_tma(k, {"a": self.a.buffer, "b": self.b.buffer},
                                  cuda_wgmma.pairs(wgmma, -(-self.M // wgmma.bm)))
                self.eng = wgmma
            else:
                k.config = configs.sized_tiles(k.config, kind, tensor_cores, self.blocks, k.sm_count, self.a.depth)
                self.eng = engine(k, self.a, self.b)
        self.mt = -(-self.M // self.eng.bm)
        self.nt = -(-self.N // self.eng.bn)
        self.kt = -(-self.a.depth // self.eng.bk)
        # rows of tiles a group of the walk order holds (cuda_wgmma.raster_rows); 0: row-major
        self.raster = (cuda_wgmma.raster_rows(self.mt, self.nt, k.sm_count)
                       if isinstance(self.eng, cuda_wgmma.WgmmaEngine) and self.eng.split == 1 else 0)
        self.dtype: DType = k.dtype(self.matmul)
        self.ctype = k.lang.ctype(self.dtype)

    def blocks(self, bm: int, bn: int) -> int:
        """Blocks a launch with this tile takes (a softmax block owns whole rows)."""
        rows = -(-self.M // bm)
        return self.batch * rows * (1 if self.softmax is not None else -(-self.N // bn))

    # ------------------------------------------------------------------ per-element work
    def coord(self, d: int) -> str:
        rank = len(self.p.domain)
        return "m" if d == rank - 2 else "n" if d == rank - 1 else f"c{d}"

    def walk(self, lines: list[str], stats: tuple[str, str] | None = None, unrounded_softmax: bool = False,
             acc: str = "ACC", coord=None, leaf=None):
        """A walk over one accumulator element; ``stats`` names the row max and sum arrays (for
        the row band: the max and ``row_norm``, the reciprocal sum or the log of the sum).
        ``unrounded_softmax`` leaves the softmax value in f32 (its store rounds it the same way).
        ``acc``: the element's accumulator name; ``coord``, ``leaf``: as in :meth:`CudaKernel.walk`
        (default :meth:`coord`, plain loads)."""
        k = self.k
        holder: dict = {}

        def anchor(value: str, m) -> str | None:
            if value == self.matmul:
                op = k.p.ops[value]
                return bind(op, acc)
            if self.softmax is not None and value == self.softmax.out and stats is not None:
                x = holder["w"].value(self.softmax.args[0], m)
                mx, total = f"{stats[0]}[slot]", f"{stats[1]}[slot]"
                exp, log = k.lang.function("exp", self.dtype), k.lang.function("log", self.dtype)
                if self.band and self.fold is not None:  # row_base holds log2(sum) too when fold_log
                    expr = self.band_ex2(1, f"fmaf({acc}, band_c, -row_base[slot])") + ("" if self.fold_log else f" * {total}")
                elif self.band:
                    expr = (self.band_ex2(1, f"fmaf({x}, {LOG2E}, -row_base[slot])") + f" * {total}" if self.softmax.op == "softmax"
                            else f"({x} - {mx}) - {total}")
                elif self.softmax.op == "softmax":
                    expr = f"{exp}({x} - {mx}) / {total}"
                else:
                    expr = f"({x} - {mx}) - {log}({total})"
                return bind(self.softmax, expr, not unrounded_softmax)
            return None

        def bind(op, expr: str, may_round: bool = True) -> str:
            name = k.fresh()
            value = k.lang.round(expr, self.dtype) if rounds(op) and may_round else expr
            lines.append(f"const {self.ctype} {name} = {value};")
            return name

        w = k.walk(lines.append, coord or self.coord, None, leaf, anchor)
        holder["w"] = w
        return w

    def store_body(self, stats: tuple[str, str] | None) -> list[str]:
        lines: list[str] = []
        w = self.walk(lines, stats)
        for s in self.p.stores:
            lines += self.k.store_lines(s, w.value(s.value, s.map), self.coord)
        if stats is None and cuda_wgmma.PAIRED_STORES and isinstance(self.eng, cuda_wgmma.WgmmaEngine):
            return self.edge_guarded(lines)  # plain wgmma GEMM: only the edges the tiles can pass
        return [f"if (m < {self.M} && n < {self.N}) {{", *indent(lines), "}"]

    def edge_guarded(self, lines: list[str]) -> list[str]:
        """``lines`` under ``m < M`` / ``n < N``, each test only where the tiles do not divide the extent
        (a plain GEMM's tiles start inside the output, so a dividing tile never passes its edge)."""
        eng = self.eng
        tests = ([f"m < {self.M}"] if self.M % eng.bm else []) + ([f"n < {self.N}"] if self.N % eng.bn else [])
        return [f"if ({' && '.join(tests)}) {{", *indent(lines), "}"] if tests else ["{", *indent(lines), "}"]

    def pairable(self, value: str, m) -> bool:
        """Is ``value`` (read or stored with map ``m``) 16-bit, contiguous along N, and does every element
        pair (n, n + 1) with n even start 4-byte aligned (every other stride even)?"""
        k, n_axis = self.k, len(self.p.domain) - 1
        if k.dtype(value) not in PAIR or list(m).count(n_axis) != 1 or not k.contiguous_axis(value, m, n_axis):
            return False
        return all(st % 2 == 0 for d, st, size in zip(m, self.p.strides(value), self.p.shape(value))
                   if d is not None and d != n_axis and size > 1)

    def paired_body(self, stage: tuple[str, int] | None = None) -> list[str] | None:
        """The epilogue of one accumulator pair (:meth:`WgmmaEngine.pairs`: columns n and n + 1, n even)
        with one 32-bit store per output, or None where that does not apply (then every element is
        stored alone): :data:`cuda_wgmma.PAIRED_STORES`, the wgmma engine, N even (a pair is all in or
        all out), and every output 16-bit and contiguous along N. Each element's values come from its
        own walk (the per-element code, ``ACC0`` / ``ACC1``, coordinate ``n`` / ``n + 1``), so the
        arithmetic and its rounding are the per-element epilogue's; 16-bit operands contiguous along N
        (a bias row) are loaded once per pair. ``stage`` (a shared array and its row length): each pair
        goes there, at the tile's row ``m - m0`` and column ``n - n0``, instead (:meth:`staged_epilogue`)."""
        k = self.k
        if not (cuda_wgmma.PAIRED_STORES and isinstance(self.eng, cuda_wgmma.WgmmaEngine) and self.N % 2 == 0):
            return None
        if not self.p.stores or not all(self.pairable(s.value, s.map) for s in self.p.stores):
            return None
        lines: list[str] = []
        loaded: dict = {}

        def leaf(q: int):
            def read(value: str, m) -> str | None:
                if value not in k.names or not self.pairable(value, m):
                    return None
                key = (value, tuple(m))
                if key not in loaded:
                    loaded[key] = name = k.fresh("pr")
                    t = PAIR[k.dtype(value)][0]
                    lines.append(f"const {t} {name} = *reinterpret_cast<const {t}*>("
                                 f"&{k.names[value]}[{k.offset(value, m, self.coord)}]);")
                return k.lang.load(f"{loaded[key]}.{'xy'[q]}", k.dtype(value))
            return read

        def coord1(d: int) -> str:
            c = self.coord(d)
            return "(n + 1)" if c == "n" else c

        w0 = self.walk(lines, acc="ACC0", leaf=leaf(0))
        first = [w0.value(s.value, s.map) for s in self.p.stores]
        w1 = self.walk(lines, acc="ACC1", coord=coord1, leaf=leaf(1))
        second = [w1.value(s.value, s.map) for s in self.p.stores]
        for s, x0, x1 in zip(self.p.stores, first, second):
            dt = k.dtype(s.value)
            x0, x1 = k.unrounded(lines, x0, s.value), k.unrounded(lines, x1, s.value)
            t, join = PAIR[dt]
            at = (f"{stage[0]}[(m - m0) * {stage[1]} + (n - n0)]" if stage is not None
                  else f"{k.names[s.value]}[{k.offset(s.value, s.map, self.coord)}]")
            line = f"*reinterpret_cast<{t}*>(&{at}) = {join}({k.lang.store(x0, dt)}, {k.lang.store(x1, dt)});"
            cond = k.guard(s, self.coord)
            lines.append(f"if ({cond}) {line}" if cond else line)
        return self.edge_guarded(lines)

    def staged_epilogue(self) -> list[str] | None:
        """The plain kernel's epilogue through shared memory (:data:`cuda_wgmma.STAGED_STORES`), or None
        where it does not apply: one 16-bit output, paired (:meth:`paired_body`), written at every point
        (no store guard), N and every other stride of it multiples of 8 (so 16-byte chunks are all in
        or all out, and aligned), the tile within the pipeline's shared memory. Once every warpgroup is
        past its last wgmma (a block barrier: the stages are free), each pair goes into the tile's
        staging rows (``BN + 8`` elements a row: a warp's 8 rows x 16 bytes hit 32 banks), then each
        warpgroup copies its 64 rows out in 16-byte chunks, a row's ``2 BN`` bytes a warp instruction.
        The values are the paired epilogue's, bit for bit."""
        k, eng = self.k, self.eng
        found = self.chunked_output() if cuda_wgmma.STAGED_STORES else None
        if found is None or eng.bm * (eng.bn + 8) * 2 > eng.shared_bytes:
            return None
        s, scalar = found
        ld = eng.bn + 8
        body = self.paired_body(stage=("cvl_stage", ld))
        per_row = eng.bn // 8  # 16-byte chunks of a staged row
        copy = (f"*reinterpret_cast<uint4*>(&{k.names[s.value]}[{k.offset(s.value, s.map, self.coord)}]) = "
                f"*reinterpret_cast<const uint4*>(&cvl_stage[r * {ld} + (n - n0)]);")
        return [
            f"{scalar}* const cvl_stage = reinterpret_cast<{scalar}*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem)));"
            f"  // the tile's outputs, {ld} a row",
            "__syncthreads();  // every warpgroup is past its last wgmma: the stages are free",
            *eng.pairs("m0", "n0", body),
            'asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + wg) : "memory");  // the warpgroup\'s 64 rows are staged',
            "#pragma unroll", f"for (int i = 0; i < {64 * per_row // 128}; ++i) {{",
            "    const int c = i * 128 + threadIdx.x % 128;", f"    const int r = wg * 64 + c / {per_row};",
            "    const int m = m0 + r;", f"    const int n = n0 + c % {per_row} * 8;",
            *indent(self.edge_guarded([copy])), "}"]

    # ------------------------------------------------------------------ skeleton
    def batch_coords(self) -> list[str]:
        """The batch coordinates ``c{d}`` of batch index ``bz``."""
        out = []
        batch_shape = self.p.domain[:-2]
        inner = 1
        for d in reversed(range(len(batch_shape))):
            div = f"bz / {inner}" if inner > 1 else "bz"
            out.append(f"const int c{d} = ({div}) % {batch_shape[d]};")
            inner *= batch_shape[d]
        return out

    def operand_bases(self) -> list[str]:
        k = self.k
        return [f"const {k.storage(self.a.buffer)}* pa = {self.a.pointer} + {batch_offset(k, self.a)};",
                f"const {k.storage(self.b.buffer)}* pb = {self.b.pointer} + {batch_offset(k, self.b)};"]

    def prologue(self, decode: list[str]) -> list[str]:
        eng = self.eng
        out = eng.setup() + decode + self.batch_coords()
        out += [f"const int m0 = mt * {eng.bm};", *self.operand_bases()]
        return out + eng.zero()

    def tile_decode(self, t: str, m0: str, n0: str) -> list[str]:
        """Output tile ``t`` (the order of the plain grid's blocks): ``bz``, ``c{d}``, ``m0``, ``n0``
        named as asked, and the operand bases ``pa``, ``pb`` (the warp-specialised kernel's decode); with
        the engine's ``pair``, ``t`` is a pair tile: row tiles 2i, 2i + 1 of a column tile, this CTA's by
        its rank."""
        eng = self.eng
        if getattr(eng, "pair", False):
            head = [f"const int tile_ = {t};", *self.pair_indices("tile_")]
        else:
            head = [f"const int tile_ = {t};", *self.tile_indices("tile_")]
        return [*head,
                "(void)bz;", *self.batch_coords(),
                f"const int {m0} = mt * {eng.bm};", f"const int {n0} = nt * {eng.bn};",
                *self.operand_bases(), "(void)pa;", "(void)pb;"]

    def tile_indices(self, t: str) -> list[str]:
        """``nt``, ``mt``, ``bz`` of output tile ``t``: column tiles fastest, then row tiles, then batches;
        with :attr:`raster` G, a batch's tiles walk groups of G row tiles (the last group fewer), each
        group column by column, so the CTAs in flight share fewer A and B panels (cuda_wgmma.RASTER_ROWS)."""
        return self.walk_order(t, self.mt, self.raster, "mt")

    def pair_indices(self, t: str) -> list[str]:
        """``nt``, ``mt``, ``bz`` of pair tile ``t`` for the CTA of cluster rank ``rank`` (clusters of 2
        sharing B, ``cuda_wgmma.pairs``): row tiles 2i, 2i + 1 of one column tile, the pairs walked as
        :meth:`tile_indices` walks tiles (groups of G / 2 pairs of row tiles)."""
        return [*self.walk_order(t, self.mt // 2, self.raster // 2, "mp_"), "const int mt = mp_ * 2 + (int)rank;"]

    def walk_order(self, t: str, rows: int, group: int, row: str) -> list[str]:
        """``nt``, ``bz`` and the row index ``row`` of item ``t`` of a grid of ``rows`` x :attr:`nt` per batch:
        row-major, or in groups of ``group`` rows (when above 1), each walked column by column."""
        if group <= 1:
            return [f"const int nt = {t} % {self.nt};", f"const int {row} = {t} / {self.nt} % {rows};",
                    f"const int bz = {t} / {self.nt * rows};"]
        g, tiles = min(group, rows), rows * self.nt
        return [f"const int bz = {t} / {tiles};", f"const int r_ = {t} % {tiles};",
                f"const int first_ = r_ / {g * self.nt} * {g};", f"const int rows_ = min({rows} - first_, {g});",
                f"const int q_ = r_ - first_ * {self.nt};",
                f"const int {row} = first_ + q_ % rows_;", "const int nt = q_ / rows_;"]

    @staticmethod
    def in_pairs(lines: list[str]) -> list[str]:
        """The kernel ``lines`` launched in clusters of 2 CTAs."""
        return [lines[0].replace("__global__ void", "__global__ void __cluster_dims__(2, 1, 1)", 1), *lines[1:]]

    def render_specialised(self, entry: str) -> Emitted:
        """cuda_wgmma.LIBRARY_WS: the persistent warp-specialised kernel (cuda_wgmma._specialised) with
        this GEMM's tile decode, operand bases and epilogue."""
        eng = self.eng
        tiles = self.batch * self.mt * self.nt
        paired = self.paired_body()
        epilogue = (eng.pairs("em0", "en0", paired) if paired is not None
                    else eng.elements("em0", "en0", self.store_body(None)))
        pair = getattr(eng, "pair", False)  # tiles walked by clusters of 2, a pair tile at a time
        body = cuda_wgmma._specialised(eng, self.kt, tiles // 2 if pair else tiles, epilogue, decode=self.tile_decode,
                                       bases=("pa", "pb"))
        threads = eng.threads + 128
        lines = [*self.k.signature(entry, threads), *indent(body), "}"]
        grid = 2 * min(tiles // 2, self.k.sm_count // 2) if pair else min(tiles, self.k.sm_count)
        return Emitted(self.in_pairs(lines) if pair else lines, (grid, 1, 1), (threads, 1, 1), eng.shared_bytes + 16 * eng.stages,
                       eng.helpers() + ("" if eng.maps else cuda_wgmma.WS_HELPERS), eng.options, 2 if pair else 0)

    def render_plain(self, entry: str) -> Emitted:
        eng = self.eng
        if getattr(eng, "specialised", False):
            return self.render_specialised(entry)
        decode = self.tile_indices("blockIdx.x")
        pair = getattr(eng, "pair", False)
        if pair:  # clusters of 2: row tiles mt, mt + 1 of one column tile
            decode = ["const int pair_ = blockIdx.x / 2;", *self.pair_indices("pair_")]
        tiles = self.batch * self.mt * self.nt
        parts = getattr(eng, "split", 1)
        steps, k0 = self.kt, (lambda s: f"({s}) * {eng.bk}")
        cluster = cuda_wgmma.split_cluster(parts) if self.chunked_output() is not None else 0
        if parts > 1:  # split-K: CTA (part, tile) walks steps part * per .. of its tile
            steps = -(-self.kt // parts)
            eng.k_overshoot = steps * parts != self.kt
            decode = [f"const int tile_ = blockIdx.x % {tiles};", f"const int part = blockIdx.x / {tiles};"]
            if cluster:  # a tile's parts are consecutive CTAs, clusters of `cluster` of them
                decode = [f"const int part = blockIdx.x % {parts};  // rank in its cluster: part % {cluster}",
                          f"const int tile_ = blockIdx.x / {parts};"]
            decode += self.tile_indices("tile_")
            k0 = lambda s: f"(part * {steps} + ({s})) * {eng.bk}"  # noqa: E731
        body = self.prologue(decode) + [f"const int n0 = nt * {eng.bn};"]
        body += eng.main_loop(steps, k0, lambda s: "n0", "m0", ("pa", "pb"), [])
        if cluster:
            body += self.split_cluster_epilogue(tiles, parts, cluster)
        else:
            if parts > 1:
                body += self.split_fixup(tiles, parts)
            staged = self.staged_epilogue()
            paired = self.paired_body() if staged is None else None
            body += (staged if staged is not None else eng.pairs("m0", "n0", paired) if paired is not None
                     else eng.elements("m0", "n0", self.store_body(None)))
        lines = [*self.k.signature(entry, eng.threads), *indent(body), "}"]
        if cluster:
            lines = [lines[0].replace("__global__ void", f"__global__ void __cluster_dims__({cluster}, 1, 1)", 1), *lines[1:]]
        return Emitted(self.in_pairs(lines) if pair else lines, (tiles * parts, 1, 1), (eng.threads, 1, 1), eng.shared_bytes,
                       eng.helpers() + (SPLIT_CLUSTER_HELPERS if cluster else ""), eng.options)

    def chunked_output(self) -> tuple | None:
        """(store, its C scalar type) where the plain wgmma kernel's one output can be written in 16-byte
        chunks of 8 columns from paired epilogues (:meth:`paired_body`'s conditions, no store guard, N and
        every other stride of the output multiples of 8, so a chunk is all in or all out, and aligned), else
        None."""
        k = self.k
        if not (isinstance(self.eng, cuda_wgmma.WgmmaEngine) and cuda_wgmma.PAIRED_STORES and len(self.p.stores) == 1):
            return None
        (s,) = self.p.stores
        n_axis = len(self.p.domain) - 1
        if self.N % 8 or k.guard(s, self.coord) or not self.pairable(s.value, s.map):
            return None
        if any(st % 8 for d, st, size in zip(s.map, self.p.strides(s.value), self.p.shape(s.value))
               if d is not None and d != n_axis and size > 1):
            return None
        return s, {DType.F16: "__half", DType.BF16: "__nv_bfloat16"}[k.dtype(s.value)]

    def split_cluster_epilogue(self, tiles: int, parts: int, size: int) -> list[str]:
        """Split-K in clusters (cuda_wgmma.split_cluster): the ``parts`` CTAs of a tile are ``parts / size`` clusters
        of ``size`` consecutive parts. Where they meet is cuda_wgmma.SPLIT_EXCHANGE: "l2" (the default) is
        :meth:`split_cluster_l2`, with this method's chunked epilogue; "dsmem" is the rest of this method, the
        meeting of sessions 14-17. Once every warpgroup is past its last wgmma, each CTA writes its f32 partial
        tile into its own shared memory (rows of ``BN + 8`` floats: the 8-byte stores of 4 rows hit 32 banks); after
        a cluster barrier, the CTA of rank ``r`` sums slice ``r`` of the tile's columns (``BN / size``), 8 columns a
        thread at a time, from every CTA of its cluster in rank order (so the bits do not depend on the CTA).
        With one cluster a tile, it runs the paired epilogue on them and stores the 8 outputs as one 16-byte
        chunk. With more, each CTA writes its slice's sum to the kernel's workspace and takes a ticket from the
        (tile, slice) counter, as :meth:`split_fixup` does; the CTA with the last ticket adds the clusters' sums
        in cluster order, runs the epilogue on its slice and puts the counter back to 0: it reads one slice a
        cluster instead of a whole partial tile a part. A second cluster barrier keeps each CTA's shared memory
        alive until its peers have read it."""
        k, eng = self.k, self.eng
        s, scalar = self.chunked_output()
        ld = eng.bn + 8
        if eng.bm * ld * 4 > eng.shared_bytes - 1024:
            raise InternalError(f"split-K in a cluster: the {eng.bm} x {ld} partial does not fit the stages")
        width = eng.bn // size  # the slice's columns
        per_row = width // 8  # 16-byte output chunks of a slice row
        chunks = eng.bm * per_row
        if width % 8 or chunks % eng.threads or parts % size:
            raise InternalError(f"split-K in a cluster: {size} CTAs do not split {eng.bn} columns in chunks")
        groups = parts // size
        rank = "part" if groups == 1 else f"(part % {size})"
        body = self.paired_body(stage=("cvl_o", 0))
        store = (f"*reinterpret_cast<uint4*>(&{k.names[s.value]}[{k.offset(s.value, s.map, self.coord)}]) = "
                 "*reinterpret_cast<const uint4*>(cvl_o);")
        chunk = [f"    const int c = i * {eng.threads} + threadIdx.x;  // a chunk of this CTA's slice",
                 f"    const int r = c / {per_row};", f"    const int nc = {rank} * {width} + c % {per_row} * 8;"]
        epilogue = ["    const int m = m0 + r;", "    const int nb = n0 + nc;", f"    __align__(16) {scalar} cvl_o[8];",
                    "    #pragma unroll", "    for (int j = 0; j < 4; ++j) {",
                    "        const int n = nb + 2 * j;", "        const int n0 = nb;  // cvl_o's column 0",
                    "        const int slot = 0;", "        (void)slot;",
                    "        const float ACC0 = v[2 * j], ACC1 = v[2 * j + 1];",
                    *indent(indent(body)), "    }",
                    "    {", "        const int n = nb;", *indent(indent(self.edge_guarded([store]))), "    }"]
        each_chunk = ["#pragma unroll", f"for (int i = 0; i < {chunks // eng.threads}; ++i) {{", *chunk]
        if cuda_wgmma.SPLIT_EXCHANGE == "l2":
            return self.split_cluster_l2(tiles, parts, size, rank, each_chunk, epilogue)
        cluster_sum = [
            f"    const unsigned at = smem0 + (unsigned)(r * {ld} + nc) * 4u;",
            "    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};",
            "    #pragma unroll",
            f"    for (int p = 0; p < {size}; ++p) {{  // in order: the bits do not depend on the CTA",
            "        const float4 x = cvl_ld_peer4(at, p), y = cvl_ld_peer4(at + 16u, p);",
            "        v[0] += x.x; v[1] += x.y; v[2] += x.z; v[3] += x.w;",
            "        v[4] += y.x; v[5] += y.y; v[6] += y.z; v[7] += y.w;",
            "    }"]
        out = [
            "__syncthreads();  // every warpgroup is past its last wgmma: the stages are free",
            "float* const cvl_part = reinterpret_cast<float*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem)));"
            f"  // this part's tile, {ld} a row",
            "#pragma unroll", f"for (int ni = 0; ni < {eng.bn // 8}; ++ni)",
            "#pragma unroll", "for (int h = 0; h < 2; ++h)",
            f"    *reinterpret_cast<float2*>(&cvl_part[(wg * 64 + wl * 16 + lane / 4 + h * 8) * {ld} + ni * 8 + lane % 4 * 2])"
            " = make_float2(acc[ni * 4 + h * 2], acc[ni * 4 + h * 2 + 1]);",
            "cvl_split_sync();  // every part of the cluster is in its CTA's shared memory"]
        if groups == 1:
            return out + [*each_chunk, *cluster_sum, *epilogue, "}",
                          "cvl_split_sync();  // no CTA leaves while a peer may still read its shared memory"]
        words = chunks * 2  # float4 of one slice's sum
        slot = f"((size_t)({{g}} * {tiles} + tile_) * {size} + {rank}) * {words} + c * 2"
        counter = f"cvl_count[tile_ * {size} + {rank}]"  # the (tile, slice) counter
        return out + [
            *self.counted_workspace(tiles * size, groups * tiles * size * words * 16, "cvl_sums"),
            *each_chunk, *cluster_sum,
            f"    float4* const to = cvl_sums + {slot.format(g=f'(part / {size})')};",
            "    __stcg(to, make_float4(v[0], v[1], v[2], v[3]));", "    __stcg(to + 1, make_float4(v[4], v[5], v[6], v[7]));",
            "}",
            "cvl_split_sync();  // every peer has read this CTA's shared memory",
            *self.last_ticket(counter, groups),
            *each_chunk,
            "    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};",
            "    #pragma unroll",
            f"    for (int g = 0; g < {groups}; ++g) {{  // in order: the bits do not depend on which cluster came last",
            f"        const float4* const from = cvl_sums + {slot.format(g='g')};",
            "        const float4 x = __ldcg(from), y = __ldcg(from + 1);",
            "        v[0] += x.x; v[1] += x.y; v[2] += x.z; v[3] += x.w;",
            "        v[4] += y.x; v[5] += y.y; v[6] += y.z; v[7] += y.w;",
            "    }", *epilogue, "}",
            f"if (threadIdx.x == 0) {counter} = 0u;  // ready for the next launch"]

    def split_cluster_l2(self, tiles: int, parts: int, size: int, rank: str, each_chunk: list[str],
                         epilogue: list[str]) -> list[str]:
        """:meth:`split_cluster_epilogue` meeting through the kernel's workspace (cuda_wgmma.SPLIT_EXCHANGE "l2").
        Slice q of the columns is accumulators ``q * per .. (q + 1) * per`` of every thread. Each CTA stores the
        slices its peers own straight from its accumulators (float4 i of thread t at ``i * threads + t``: a warp's
        512 contiguous bytes a store), then a cluster barrier (the cluster's CTAs are resident together, so
        waiting is safe); the CTA of rank r adds every part of slice r in rank order, its own from registers and
        its peers' read back in the same layout, so the bits are those of the shared-memory meeting. With more
        than one cluster a tile, the slice's sum goes to the workspace in that layout too and the CTA with the
        (tile, slice) counter's last ticket adds the clusters' sums in cluster order (its own cluster's from its
        registers). The sum then goes through the free stages (rows of ``BN + 8`` floats) to the chunked
        epilogue, which stores 16-byte chunks of 8 columns."""
        eng = self.eng
        threads, groups = eng.threads, parts // size
        per = eng.regs // size  # a slice's accumulators a thread
        if per % 4:
            raise InternalError(f"split-K in a cluster: {eng.regs} accumulators do not split in {size} float4 slices")
        per4, ld, nis = per // 4, eng.bn + 8, eng.bn // 8 // size
        block = per4 * threads  # float4 of one slice of one part
        group = "0" if groups == 1 else f"(part / {size})"
        pair_slots = tiles * groups * size * (size - 1)

        def pair_slot(q: int, p: str) -> str:  # slice q written by rank p (!= q) of cluster (tile_, group)
            writer = str(int(p) - (int(p) > q)) if p.isdigit() else f"({p} - ({p} > {q}))"
            return f"cvl_pair + ((size_t)(tile_ * {groups} + {group}) * {size * (size - 1)} + {q * (size - 1)} + {writer}) * {block}"

        def four(q: int, i: str = "i") -> str:
            return ", ".join(f"acc[{q * per} + 4 * {i} + {j}]" for j in range(4))

        def slices(body) -> list[str]:  # ``body(q)`` for this CTA's slice q (= rank): acc's indices stay constant
            out = []
            for q in range(size):
                out += [f"if ({rank} == {q}) {{", *indent(body(q)), "}"]
            return out

        add = ["v.x += x.x; v.y += x.y; v.z += x.z; v.w += x.w;"]

        def summed(q: int, order: str, count: int, own: str, load: str) -> list[str]:  # slice q's sum, in order
            return ["#pragma unroll", f"for (int i = 0; i < {per4}; ++i) {{",
                    "    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);", "    #pragma unroll",
                    f"    for (int {order} = 0; {order} < {count}; ++{order}) {{"
                    "  // in order: the bits do not depend on which CTA came last",
                    f"        const float4 x = {own} ? make_float4({four(q)}) : __ldcg({load} + i * {threads} + threadIdx.x);",
                    *indent(indent(add)), "    }",
                    *(f"    acc[{q * per} + 4 * i + {j}] = v.{c};" for j, c in enumerate("xyzw")), "}"]

        if groups == 1:
            ws = self.k.workspace(pair_slots * block * 16)
            lines = [f"float4* const cvl_pair = reinterpret_cast<float4*>({ws});"]
        else:
            sums = groups * tiles * size * block  # float4 of the clusters' slice sums
            lines = [*self.counted_workspace(tiles * size, (sums + pair_slots * block) * 16, "cvl_sums"),
                     f"float4* const cvl_pair = cvl_sums + {sums};"]
        out = ["__syncthreads();  // every warpgroup is past its last wgmma: the stages are free", *lines]
        for q in range(size):  # the slices the peers own
            out += [f"if ({rank} != {q}) {{", f"    float4* const to = {pair_slot(q, rank)} + threadIdx.x;",
                    "    #pragma unroll", f"    for (int i = 0; i < {per4}; ++i)",
                    f"        __stcg(to + i * {threads}, make_float4({four(q)}));", "}"]
        out += ["__threadfence();", "cvl_split_sync();  // every CTA's parts of its peers' slices are in the workspace"]
        out += slices(lambda q: summed(q, "p", size, f"p == {q}", f"{pair_slot(q, 'p')}"))
        if groups > 1:
            sum_slot = f"cvl_sums + ((size_t)({{g}} * {tiles} + tile_) * {size} + {rank}) * {block}"
            counter = f"cvl_count[tile_ * {size} + {rank}]"  # the (tile, slice) counter
            out += slices(lambda q: [f"float4* const to = {sum_slot.format(g=group)} + threadIdx.x;",
                                     "#pragma unroll", f"for (int i = 0; i < {per4}; ++i)",
                                     f"    __stcg(to + i * {threads}, make_float4({four(q)}));"])
            out += self.last_ticket(counter, groups)
            out += slices(lambda q: summed(q, "g", groups, f"g == {group}", sum_slot.format(g="g")))
            out += [f"if (threadIdx.x == 0) {counter} = 0u;  // ready for the next launch"]
        out += ["float* const cvl_part = reinterpret_cast<float*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem)));"
                f"  // this CTA's slice of the tile, {ld} a row"]
        out += slices(lambda q: [
            "#pragma unroll", f"for (int ni = {q * nis}; ni < {(q + 1) * nis}; ++ni)", "#pragma unroll",
            "for (int h = 0; h < 2; ++h)",
            f"    *reinterpret_cast<float2*>(&cvl_part[(wg * 64 + wl * 16 + lane / 4 + h * 8) * {ld} + ni * 8 + lane % 4 * 2])"
            " = make_float2(acc[ni * 4 + h * 2], acc[ni * 4 + h * 2 + 1]);"])
        return out + ["__syncthreads();  // the slice's sums are staged", *each_chunk,
                      f"    const float4 x = *reinterpret_cast<const float4*>(&cvl_part[r * {ld} + nc]);",
                      f"    const float4 y = *reinterpret_cast<const float4*>(&cvl_part[r * {ld} + nc + 4]);",
                      "    const float v[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};", *epilogue, "}"]

    def counted_workspace(self, counters: int, payload: int, data: str) -> list[str]:
        """Ask for the kernel's workspace as ``counters`` tickets' counters (``cvl_count``, 256-byte aligned)
        followed by ``payload`` bytes of float4 (``data``); the lines that name both."""
        offset = -(-counters * 4 // 256) * 256
        ws = self.k.workspace(offset + payload)
        return [f"unsigned* const cvl_count = reinterpret_cast<unsigned*>({ws});",
                f"float4* const {data} = reinterpret_cast<float4*>({ws} + {offset});"]

    @staticmethod
    def last_ticket(counter: str, arrivals: int) -> list[str]:
        """The CUDA guide's last-block pattern: every thread's writes made visible device-wide, a block
        barrier, one thread's ticket from ``counter``; all but the block that takes the last of ``arrivals``
        tickets leave, and that one sees every other block's writes."""
        return ["__threadfence();  // this thread's writes are visible device-wide before the ticket is taken",
                "__shared__ unsigned cvl_ticket;",
                "__syncthreads();",
                f"if (threadIdx.x == 0) cvl_ticket = atomicAdd(&{counter}, 1u);",
                "__syncthreads();",
                f"if (cvl_ticket != {arrivals - 1}u) return;  // the last to arrive finishes it",
                "__threadfence();"]

    def split_fixup(self, tiles: int, parts: int) -> list[str]:
        """Split-K's meeting point (cuda_wgmma.SPLIT_K), after the main loop of CTA (``part``, ``tile_``):
        its f32 partial tile goes to the workspace (float4 ``i`` of thread t at ``i * threads + t``: a warp
        writes 512 contiguous bytes), then one thread takes a ticket from the tile's counter (after every
        thread's fence, as the CUDA guide's last-block pattern). The CTA with the last ticket adds the
        ``parts`` partials in the order 0 .. parts - 1 into the accumulators (its own one read back like the
        others, so the sum's bits never depend on which CTA came last), puts the counter back to 0 for the
        next launch and goes on to the epilogue; the others leave. Nobody waits for anybody."""
        eng = self.eng
        words = eng.bm * eng.bn // 4  # float4 of one partial tile
        per_thread = eng.regs // 4
        return [
            "{  // split-K: this part's partial tile into the workspace, then a ticket from the tile's counter",
            *indent(self.counted_workspace(tiles, parts * tiles * words * 16, "cvl_parts")),
            f"    float4* const mine = cvl_parts + ((size_t)part * {tiles} + tile_) * {words} + threadIdx.x;",
            "    #pragma unroll", f"    for (int i = 0; i < {per_thread}; ++i)",
            f"        __stcg(mine + i * {eng.threads}, "
            "make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));",
            *indent(self.last_ticket("cvl_count[tile_]", parts)),
            *self.split_sum(tiles, parts, words, per_thread),
            "    if (threadIdx.x == 0) cvl_count[tile_] = 0u;  // ready for the next launch",
            "}"]

    def split_sum(self, tiles: int, parts: int, words: int, per_thread: int) -> list[str]:
        """The last CTA's sum of the parts, loaded into registers: 16 float4 in flight a thread beside 128 x 128's
        accumulators, 8 beside 128 x 256's (more spill). (Through the free stages by cp.async instead, two half
        parts in flight, measured the same: 42.0 us against 41.8 at 1024 x 1024 x 8192; commit c9ac6de.)"""
        eng = self.eng
        chunk = 16 if eng.bn <= 128 else 8
        return [
            "    #pragma unroll", f"    for (int i = 0; i < {eng.regs}; ++i) acc[i] = 0.0f;",
            "    #pragma unroll",
            f"    for (int c = 0; c < {per_thread // chunk}; ++c) {{  // {chunk} float4 loads in flight a round",
            "        #pragma unroll 1",
            f"        for (int p = 0; p < {parts}; ++p) {{  // in order: the bits do not depend on which part came last",
            f"            const float4* const from = cvl_parts + ((size_t)p * {tiles} + tile_) * {words} + threadIdx.x;",
            "            #pragma unroll", f"            for (int j = 0; j < {chunk}; ++j) {{",
            f"                const int i = c * {chunk} + j;",
            f"                const float4 v = __ldcg(from + i * {eng.threads});",
            "                acc[4 * i] += v.x;", "                acc[4 * i + 1] += v.y;",
            "                acc[4 * i + 2] += v.z;", "                acc[4 * i + 3] += v.w;",
            "            }", "        }", "    }"]

    def render_softmax(self, entry: str) -> Emitted:
        k, eng = self.k, self.eng
        kt, nt = self.kt, self.nt
        decode = [f"const int mt = blockIdx.x % {self.mt};", f"const int bz = blockIdx.x / {self.mt};"]
        neg_inf = k.lang.literal(-math.inf, self.dtype)
        body = self.prologue(decode)
        body += [f"{self.ctype} row_max[{eng.slots}], row_sum[{eng.slots}];",
                 "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
                 f"    row_max[r] = {neg_inf};", "    row_sum[r] = 0;", "}"]
        stats = self.statistics(neg_inf)
        if eng.warps_n > 1:
            stats += [f"if (step == {kt * nt - 1}) {{", *indent(self.merge_warps()), "}"]
        tile_end = [f"const int n0 = step / {kt} % {nt} * {eng.bn};",
                    f"if (step < {kt * nt}) {{", *indent(stats), "} else {",
                    *indent(eng.elements("m0", "n0", self.store_body(("row_max", "row_sum")))), "}",
                    *eng.zero()]
        after = [f"if (step % {kt} == {kt - 1}) {{", *indent(tile_end), "}"]
        body += eng.main_loop(2 * kt * nt, lambda s: f"({s}) % {kt} * {eng.bk}",
                              lambda s: f"({s}) / {kt} % {nt} * {eng.bn}", "m0", ("pa", "pb"), after)
        lines = [*k.signature(entry, eng.threads), *indent(body), "}"]
        return Emitted(lines, (self.batch * self.mt, 1, 1), (eng.threads, 1, 1), eng.shared_bytes, eng.helpers())

    def statistics(self, neg_inf: str) -> list[str]:
        """Online max and sum of one column tile (lanes of a row combine by shuffles)."""
        k, eng = self.k, self.eng
        exp = k.lang.function("exp", self.dtype)
        pre: list[str] = []
        w = self.walk(pre)
        x = w.value(self.softmax.args[0], self.p.layout.maps[self.softmax.args[0]])
        per_element = [f"{self.ctype} s = {neg_inf};",
                       f"if (m < {self.M} && n < {self.N}) {{", *indent(pre), f"    s = {x};", "}",
                       "ACC = s;", "tile_max[slot] = cvl_max(tile_max[slot], s);"]
        lanes = eng.row_lanes
        return [
            f"{self.ctype} tile_max[{eng.slots}], tile_sum[{eng.slots}], rescale[{eng.slots}];",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{ tile_max[r] = {neg_inf}; tile_sum[r] = 0; }}",
            *eng.elements("m0", "n0", per_element),
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    const {self.ctype} top = cvl_max(row_max[r], cvl_warp_max(tile_max[r], {lanes}));",
            f"    rescale[r] = row_max[r] == top ? 1 : {exp}(row_max[r] - top);",
            "    row_max[r] = top;", "}",
            *eng.elements("m0", "n0", [f"tile_sum[slot] += ACC == {neg_inf} ? 0 : {exp}(ACC - row_max[slot]);"]),
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r)",
            f"    row_sum[r] = row_sum[r] * rescale[r] + cvl_warp_sum(tile_sum[r], {lanes});",
        ]


    def merge_warps(self) -> list[str]:
        """After the last column tile: the warps that split a row's columns combine their
        running maxima and sums (the same log-sum-exp merge as between column tiles)."""
        k, eng = self.k, self.eng
        exp = k.lang.function("exp", self.dtype)
        shape = f"[{eng.warps_n}][{eng.bm}]"
        row = eng.slot_row("r")
        return [
            f"__shared__ {self.ctype} warp_max{shape}, warp_sum{shape};",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    if (lane % {eng.row_lanes} == 0) {{",
            f"        warp_max[{eng.column_warp()}][{row}] = row_max[r];",
            f"        warp_sum[{eng.column_warp()}][{row}] = row_sum[r];", "    }", "}",
            "__syncthreads();",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    {self.ctype} top = warp_max[0][{row}];",
            "#pragma unroll", f"    for (int w = 1; w < {eng.warps_n}; ++w) top = cvl_max(top, warp_max[w][{row}]);",
            f"    {self.ctype} total = 0;",
            "#pragma unroll", f"    for (int w = 0; w < {eng.warps_n}; ++w) {{",
            f"        const {self.ctype} m = warp_max[w][{row}];",
            f"        total += warp_sum[w][{row}] * (m == top ? 1 : {exp}(m - top));", "    }",
            "    row_max[r] = top;", "    row_sum[r] = total;", "}",
        ]

    # ------------------------------------------------------------------ the row-band template
    def staged_store(self):
        """The one store the write pass can stage through shared memory (a 16-bit tensor,
        contiguous along N, rows 16-byte aligned), or None (then each element is stored)."""
        if len(self.p.stores) != 1:
            return None
        s = self.p.stores[0]
        rank = len(self.p.domain)
        if self.k.dtype(s.value) not in (DType.F16, DType.BF16) or self.N % 8 or self.k.guard(s, self.coord):
            return None
        shape, strides = self.p.shape(s.value), self.p.strides(s.value)
        axes = {d: (st, size) for d, st, size in zip(s.map, strides, shape) if d is not None and size > 1}
        if axes.get(rank - 1) != (1, self.N) or rank - 2 not in axes and self.M > 1:
            return None
        return s if all(st % 8 == 0 for d, (st, _size) in axes.items() if d != rank - 1) else None

    def band_fold(self) -> str | None:
        """ROW_BAND_TUNING "fold": the uniform ``u`` when the softmax's argument is ``GEMM * u`` ("" for the
        GEMM value itself), neither rounded, and no column is masked (N a multiple of the tile); else None."""
        if not ROW_BAND_TUNING.get("fold", True) or self.softmax.op != "softmax" or self.N % self.eng.bn:
            return None
        ops = self.k.p.ops
        if rounds(ops[self.matmul]):
            return None
        arg = self.softmax.args[0]
        if arg == self.matmul:
            return ""
        op = ops.get(arg)
        if op is None or op.op != "mul" or rounds(op) or len(op.args) != 2 or self.matmul not in op.args:
            return None
        other = op.args[1] if op.args[0] == self.matmul else op.args[0]
        if other == self.matmul or other not in self.k.uniform_names or self.k.dtype(other) is DType.BOOL:
            return None
        return self.k.uniform_names[other]

    def band_guard(self) -> str | None:
        """The bounds test an accumulator element needs (none when the tiles divide M and N)."""
        tests = [f"m < {self.M}"] if self.M % self.eng.bm else []
        tests += [f"n < {self.N}"] if self.N % self.eng.bn else []
        return " && ".join(tests) or None

    def guarded(self, body: list[str]) -> list[str]:
        g = self.band_guard()
        return [f"if ({g}) {{", *indent(body), "}"] if g else body

    def render_band(self, entry: str) -> Emitted:
        k, eng, a, b = self.k, self.eng, self.a, self.b
        nt, S, mi, st = self.nt, eng.stages, eng.mi, eng.storage
        ks = eng.bk // 16
        steps = 2 * nt
        self.fold = self.band_fold()
        self.poly = tuple(ROW_BAND_TUNING.get("poly", (0, 0)))
        self.fold_log = self.fold is not None and k.dtype(self.softmax.out) in (DType.F16, DType.BF16)
        per_row_b = eng.bk // 8  # 16-byte chunks of a B row (all of K)
        stream = (ROW_BAND_TUNING.get("stream", True) and b.k_major and b.depth == eng.bk and b.stride_k == 1
                  and self.N % eng.bn == 0 and eng.threads % per_row_b == 0
                  and (eng.bn * per_row_b) % eng.threads == 0)
        self.stream = bool(ROW_BAND_TUNING.get("stream", True))
        band_elems = max(eng.tile_elems(a), eng.bm * (eng.bn + 8))
        neg_inf = k.lang.literal(-math.inf, self.dtype)
        body = [
            "extern __shared__ __align__(16) unsigned char cvl_smem[];",
            f"{st}* const sa = reinterpret_cast<{st}*>(cvl_smem);  // the A band, later output staging",
            f"{st}* const sb = sa + {band_elems};  // {S} B tiles",
            "const int lane = threadIdx.x % 32;",
            f"const int wm = threadIdx.x / 32 * {eng.w.warp_m};  // this warp's rows of the band",
            "const int wn = 0;",
            f"float acc[{mi}][{eng.ni}][4];",
            f"unsigned af[{mi}][{ks}][4];  // the warp's A rows, all of K",
            f"const int mt = blockIdx.x % {self.mt};", f"const int bz = blockIdx.x / {self.mt};",
        ]
        batch_shape = self.p.domain[:-2]
        inner = 1
        for d in reversed(range(len(batch_shape))):
            div = f"bz / {inner}" if inner > 1 else "bz"
            body.append(f"const int c{d} = ({div}) % {batch_shape[d]};")
            inner *= batch_shape[d]
        body += [f"const int m0 = mt * {eng.bm};",
                 f"const {k.storage(a.buffer)}* pa = {a.pointer} + {batch_offset(k, a)};",
                 f"const {k.storage(b.buffer)}* pb = {b.pointer} + {batch_offset(k, b)};",
                 *self.band_state(neg_inf)]
        b_elems = eng.tile_elems(b)
        if stream:
            rows_per = eng.threads // per_row_b  # B rows one pass of the block's threads covers
            body += [f"const {st}* b_src = pb + threadIdx.x / {per_row_b} * {k.stride_literal(b.stride_mn)}"
                     f" + threadIdx.x % {per_row_b} * 8;  // this thread's chunks of the next B tile",
                     f"const unsigned b_dst = cvl_smem_addr(sb + threadIdx.x / {per_row_b} * {eng.ld(b)}"
                     f" + threadIdx.x % {per_row_b} * 8);",
                     "unsigned b_stage = 0;  // byte offset of the stage the next load fills",
                     "unsigned c_stage = 0;  // byte offset of the stage the next step reads"]

            def load_b(stage: str, step: str) -> list[str]:
                return ["#pragma unroll", f"for (int i = 0; i < {eng.bn * per_row_b // eng.threads}; ++i)",
                        f"    cvl_cp_async16_at(b_dst + b_stage + i * {rows_per * eng.ld(b) * 2}, "
                        f"b_src + i * {rows_per * b.stride_mn});",
                        f"b_src += {eng.bn * b.stride_mn};",
                        f"if (++b_tile == {nt}) {{ b_tile = 0; b_src -= {nt * eng.bn * b.stride_mn}; }}",
                        f"b_stage = b_stage == {(S - 1) * b_elems * 2} ? 0 : b_stage + {b_elems * 2};"]
            body.append("int b_tile = 0;  // column tile of the next load")
        else:
            def load_b(stage: str, step: str) -> list[str]:
                return eng.load(b, stage, f"({step}) % {nt} * {eng.bn}", "0", "pb")

        body += eng.load(a, "0", "m0", "0", "pa") + ["cvl_cp_commit();"]
        for i in range(S - 1):
            body += [f"if ({i} < {steps}) {{", *indent(load_b(str(i), str(i))), "}", "cvl_cp_commit();"]
        load_a, a_addr = eng.a_fragment("sa", "kq * 16")
        body += [f"cvl_cp_wait<{S - 1}>();", "__syncthreads();",
                 "#pragma unroll", f"for (int mi = 0; mi < {mi}; ++mi)",
                 "#pragma unroll", f"    for (int kq = 0; kq < {ks}; ++kq) {load_a}(af[mi][kq], {a_addr});"]
        if stream:  # ldmatrix addresses: this lane's offset (set once) + the stage + constants
            ldb = eng.ld(b)
            body.append(f"const unsigned b_frag = cvl_smem_addr(sb) + ((lane / 16 * 8 + lane % 8) * {ldb}"
                        " + (lane / 8) % 2 * 8) * 2;")
            read_stage = ["const unsigned tb = b_frag + c_stage;",
                          f"c_stage = c_stage == {(S - 1) * b_elems * 2} ? 0 : c_stage + {b_elems * 2};"]
            fragments = ["#pragma unroll", f"for (int nj = 0; nj < {eng.ni // 2}; ++nj) {{",
                         "    unsigned r[4];", f"    cvl_ldsm_x4_at(r, tb + (nj * {16 * ldb} + kq * 16) * 2);",
                         "    bf[2 * nj][0] = r[0]; bf[2 * nj][1] = r[1];",
                         "    bf[2 * nj + 1][0] = r[2]; bf[2 * nj + 1][1] = r[3];", "}"]
        else:
            read_stage = [f"const {st}* tb = sb + (step % {S}) * {b_elems};"]
            fragments = eng.b_fragments("tb", "kq * 16")
        compute = [*read_stage,
                   "#pragma unroll", f"for (int kq = 0; kq < {ks}; ++kq) {{", f"    unsigned bf[{eng.ni}][2];",
                   *indent(fragments),
                   "#pragma unroll", f"    for (int mi = 0; mi < {mi}; ++mi)", "#pragma unroll",
                   f"        for (int ni = 0; ni < {eng.ni}; ++ni) cvl_mma(acc[mi][ni], af[mi][kq], bf[ni]);", "}"]
        epilogue = [f"const int n0 = step % {nt} * {eng.bn};",
                    f"if (step < {nt}) {{", *indent(self.band_statistics(neg_inf)),
                    f"    if (step == {nt - 1}) {{", *indent(self.band_merge(), 2), "    }",
                    "} else {", *indent(self.band_write()), "}"]
        if ROW_BAND_TUNING.get("overlap", False):
            body += self.band_overlapped(steps, S, load_b, compute, epilogue)
        else:
            loop = [f"cvl_cp_wait<{S - 2}>();", "__syncthreads();",
                    f"if (step + {S - 1} < {steps}) {{", *indent(load_b(f"(step + {S - 1}) % {S}", f"step + {S - 1}")),
                    "}", "cvl_cp_commit();", *eng.zero(), "{", *indent(compute), "}", *epilogue]
            body += [f"for (int step = 0; step < {steps}; ++step) {{", *indent(loop), "}"]
        lines = [*k.signature(entry, eng.threads), *indent(body), "}"]
        shared = 2 * (band_elems + S * b_elems)
        return Emitted(lines, (self.batch * self.mt, 1, 1), (eng.threads, 1, 1), shared,
                       eng.helpers() + BAND_HELPERS + (BAND_STREAM_HELPER if stream else "")
                       + (BAND_POLY_HELPER if any(self.poly) else "")
                       + (STSM_HELPER + STSM_PACK if self.band_stsm() else ""))

    def band_state(self, neg_inf: str) -> list[str]:
        """The band's per-thread row statistics (and, when the scale folds, its constants)."""
        slots = self.eng.slots
        lines = [f"float row_max[{slots}], row_sum[{slots}], row_base[{slots}], row_norm[{slots}];",
                 "#pragma unroll", f"for (int r = 0; r < {slots}; ++r) {{",
                 f"    row_max[r] = {neg_inf};", "    row_sum[r] = 0.0f;", "}"]
        if self.fold is not None:
            u = self.fold or "1.0f"
            lines += [f"const float band_c = {u} * {LOG2E};  // exp(acc * u) = 2^(acc * band_c)",
                      f"const float band_abs = fabsf({u});", f"const bool band_flip = {u} < 0.0f;"]
        return lines

    def band_wgmma_operands(self, max_depth: int = 64) -> bool:
        """Whether :meth:`render_band_wgmma` (``max_depth`` 64) or the cluster band (up to
        ``cuda_band_cluster.MAX_DEPTH``) can run this band on sm_90/sm_90a: both operands K-major 16-bit
        with K <= ``max_depth`` and 16-byte rows, at most one batch axis, each operand's batch contiguous
        (its rows of all batches one 2-D tensor for TMA), one staged 16-bit output."""
        if self.k.arch not in cuda_wgmma.WGMMA_ARCHS or self.staged_store() is None:
            return False
        if len(self.p.domain) > 3 or self.k.config.overridden:
            return False
        for o in (self.a, self.b):
            if not o.k_major or o.depth > max_depth or o.depth % 8 or o.stride_k != 1 or o.stride_mn % 8 or o.dtype is not self.a.dtype:
                return False
            if len(o.batch) > 1 or any(st != o.extent * o.stride_mn for _axis, st in o.batch):
                return False
        return True

    def render_band_wgmma(self, entry: str) -> Emitted:
        """The row band on Hopper's wgmma: two consumer warpgroups own 128 rows (64 each, every
        column), A (the band, all of K) is loaded once by TMA and read from shared memory by every
        wgmma; B tiles (BN columns, all of K) stream through a ring of ``S`` TMA stages.

        Two accumulator sets: column tile ``t + 1``'s wgmma is issued (asynchronously) before tile
        ``t``'s epilogue runs, so the tensor cores work while the exps do. Step ``t``: wait for tile
        ``t + 1``'s stage and issue its wgmma; wait until only that group is in flight (tile ``t``
        retired); ``__syncthreads`` (every warpgroup retired tile ``t``); thread 0 refills tile
        ``t``'s stage with tile ``t + S``; then tile ``t``'s epilogue: the mma.sync band's
        statistics pass (:meth:`band_statistics`, :meth:`band_merge`), or its write pass with each
        warp's output tile staged in shared memory and written as coalesced 16-byte streaming stores.
        """
        k, a, b = self.k, self.a, self.b
        bn, stages, min_blocks = ROW_BAND_TUNING.get("wgmma", (64, 4, 2))
        wa = cuda_wgmma.WgmmaOperand("a", "", a.dtype, a.extent, 64, True, a.stride_mn, 1)
        wb = cuda_wgmma.WgmmaOperand("b", "", b.dtype, b.extent, 64, True, b.stride_mn, 1)
        eng = cuda_wgmma.WgmmaEngine(wa, wb, bm=128, bn=bn, stages=stages, pending=0, index_t=k.index_t)
        self.eng, self.poly, self.stream = eng, (0, 0), False
        self.mt, self.nt = -(-self.M // 128), -(-self.N // bn)
        nt, S, steps = self.nt, stages, 2 * self.nt
        self.fold = self.band_fold()
        self.fold_log = self.fold is not None and k.dtype(self.softmax.out) in (DType.F16, DType.BF16)
        k.config = replace(k.config, block=256, max_threads=256, min_blocks=min_blocks)
        batches = {o.role: (element_count(self.p.domain[:-2]) if o.batch else 1) for o in (a, b)}
        maps = {o.role: k.tensor_map(f"tma_{o.role}", o.buffer, (o.depth, o.extent * batches[o.role]),
                                     o.stride_mn * 2, (64, 128 if o.role == "a" else bn)) for o in (a, b)}
        eng.maps = maps
        tile_a, tile_b = 128 * 128, bn * 128  # bytes: rows of 64 halves
        lds = bn + 8  # staging row, in halves (16 bytes of padding against bank conflicts)
        stage_out = 8 * 16 * lds * 2  # 8 warps x 16 rows
        ks = -(-a.depth // 16)
        neg_inf = k.lang.literal(-math.inf, self.dtype)
        row_a = f"{'bz * ' + str(self.M) + ' + ' if a.batch else ''}m0"
        row_b = (f"{'bz * ' + str(self.N) + ' + ' if b.batch else ''}") + "({t}) % " + str(nt) + f" * {bn}"

        def load_b(t: str) -> list[str]:
            stage = f"({t}) % {S}"
            return [f"    cvl_mbar_expect_tx(full0 + {stage} * 8, {tile_b}u);",
                    f"    cvl_tma_2d(sb + {stage} * {tile_b}u, {maps['b']}, 0, {row_b.format(t=t)}, full0 + {stage} * 8);"]

        def issue(t: str, acc: str) -> list[str]:  # tile t's wgmma into acc (waits for its stage)
            db = f"desc_b + (((({t}) % {S}) * {tile_b} + kk * 32) >> 4)"
            return [f"cvl_mbar_wait(full0 + (({t}) % {S}) * 8, (({t}) / {S}) & 1);", "cvl_wgmma_fence();",
                    "{", "    const int kk = 0;", f"    cvl_wgmma_set({acc}, desc_a, {db});", "}",
                    "#pragma unroll", f"for (int kk = 1; kk < {ks}; ++kk)",
                    f"    cvl_wgmma({acc}, desc_a + ((kk * 32) >> 4), {db});",
                    "cvl_wgmma_commit();"]

        body = [
            "extern __shared__ __align__(1024) unsigned char cvl_smem[];",
            "const unsigned smem0 = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;",
            "const unsigned sa = smem0;  // the A band: 128 rows x 64 of K",
            f"const unsigned sb = smem0 + {tile_a}u;  // {S} B tiles of {bn} rows",
            f"{eng.storage}* const so = reinterpret_cast<{eng.storage}*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem))"
            f" + {tile_a + S * tile_b}) + (threadIdx.x / 32) * {16 * lds};  // this warp's 16 staging rows",
            "const int lane = threadIdx.x % 32;", "const int wg = threadIdx.x / 128;", "const int wl = (threadIdx.x / 32) % 4;",
            f"const unsigned long long desc_a = cvl_wgmma_desc(sa + wg * {64 * 128}u, 16u, 1024u);",
            "const unsigned long long desc_b = cvl_wgmma_desc(sb, 16u, 1024u);",
            f"float acc_even[{eng.regs}], acc_odd[{eng.regs}];  // even and odd column steps",
            f"__shared__ __align__(8) unsigned long long cvl_full[{S + 1}];  // B stages, then A",
            "const unsigned full0 = cvl_smem_addr(cvl_full);",
            f"const int mt = blockIdx.x % {self.mt};", f"const int bz = blockIdx.x / {self.mt};", "(void)bz;",
            *self.batch_coords(),
            "const int m0 = mt * 128;",
            "if (threadIdx.x == 0) {",
            f"    for (int s = 0; s <= {S}; ++s) cvl_mbar_init(full0 + s * 8, 1);",
            "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");",
            f"    cvl_mbar_expect_tx(full0 + {S * 8}, {tile_a}u);",
            f"    cvl_tma_2d(sa, {maps['a']}, 0, {row_a}, full0 + {S * 8});",
            f"    for (int t = 0; t < {min(S, steps)}; ++t) {{", *load_b("t"), "    }",
            "}",
            "__syncthreads();",
            *self.band_state(neg_inf),
        ]
        body += [f"cvl_mbar_wait(full0 + {S * 8}, 0);  // the band is in", *issue("0", "acc_even")]
        staged = self.staged_store()
        pair, pack = (("__half2", "__floats2half2_rn") if k.dtype(staged.value) is DType.F16
                      else ("__nv_bfloat162", "__floats2bfloat162_rn"))
        per_row = bn // 8  # 16-byte chunks of a staged row
        target = f"{k.names[staged.value]}[{k.offset(staged.value, staged.map, self.coord)}]"
        guard = " && ".join(([f"m < {self.M}"] if self.M % 128 else []) + ([f"n < {self.N}"] if self.N % bn else []))
        copy = staged_rows_copy("m0 + wg * 64 + wl * 16", per_row, 16 * per_row // 32, guard,
                                f"__stcs(reinterpret_cast<uint4*>(&{target}), "
                                f"*reinterpret_cast<const uint4*>(so + r * {lds} + c % {per_row} * 8));")
        # each pair of columns straight from the accumulators into the staging rows: no accumulator
        # is written while the next tile's wgmma is in flight (ptxas would serialise the wgmma)
        pre1: list[str] = []
        rank = len(self.p.domain)
        w1 = self.walk(pre1, ("row_max", "row_norm"), unrounded_softmax=staged.value == self.softmax.out, acc="ACC1",
                       coord=lambda d: "(n + 1)" if d == rank - 1 else self.coord(d))
        pre0: list[str] = []
        w0 = self.walk(pre0, ("row_max", "row_norm"), unrounded_softmax=staged.value == self.softmax.out, acc="ACC0")
        v0, v1 = w0.value(staged.value, staged.map), w1.value(staged.value, staged.map)
        write = ["__syncwarp();  // the warp's previous tile is out of its staging rows",
                 *eng.pairs("m0", "n0", self.guarded([*pre0, *pre1,
                            f"*reinterpret_cast<{pair}*>(so + (lane / 4 + h * 8) * {lds} + ni * 8 + lane % 4 * 2) = "
                            f"{pack}({v0}, {v1});"])),
                 "__syncwarp();", *copy]
        epilogue = [f"const int n0 = step % {nt} * {bn};",
                    f"if (step < {nt}) {{", *indent(self.band_statistics(neg_inf)),
                    f"    if (step == {nt - 1}) {{", *indent(self.band_merge(), 2), "    }",
                    "} else {", *indent(write), "}"]

        def half(t: str, cur: str, nxt: str) -> list[str]:  # step t: epilogue of cur, wgmma of t + 1 into nxt
            return ["{", f"    const int step = {t};",
                    f"    if (step + 1 < {steps}) {{", *indent(issue("step + 1", nxt), 2),
                    "        cvl_wgmma_wait<1>();", "    } else {", "        cvl_wgmma_wait<0>();", "    }",
                    f"    cvl_wgmma_pin({cur});", "    __syncthreads();  // every warpgroup retired this tile's wgmma",
                    f"    if (threadIdx.x == 0 && step + {S} < {steps}) {{", *indent(load_b(f"step + {S}")), "    }",
                    f"    float (&acc)[{eng.regs}] = {cur};", *indent(epilogue), "}"]

        body += ["#pragma unroll 1", f"for (int pair_step = 0; pair_step < {steps}; pair_step += 2) {{",
                 *indent(half("pair_step", "acc_even", "acc_odd")),
                 f"    if (pair_step + 1 < {steps}) {{", *indent(half("pair_step + 1", "acc_odd", "acc_even"), 2), "    }",
                 "}"]
        lines = [*k.signature(entry, 256), *indent(body), "}"]
        shared = tile_a + S * tile_b + stage_out + 1024
        return Emitted(lines, (self.batch * self.mt, 1, 1), (256, 1, 1), shared,
                       eng.helpers() + eng.set_helper() + BAND_HELPERS, eng.options)

    def band_overlapped(self, steps: int, S: int, load_b, compute: list[str], epilogue: list[str]) -> list[str]:
        """ROW_BAND_TUNING "overlap": two accumulator sets; the mma of column tile t + 1 is issued before
        the exps and stores of tile t, so the tensor pipe runs while the MUFU and FMA pipes work on the
        previous tile (mma.sync results are only waited for where they are read). Each tile's wait,
        barrier and load come in the same order as in the plain loop (the stage a load overwrites was read
        by the previous tile's mma, before the barrier), so the pipeline invariants are the plain loop's."""
        eng = self.eng
        shape = f"[{eng.mi}][{eng.ni}][4]"

        def tile(t: str, buf: str) -> list[str]:  # tile t's GEMM into buf
            inner = [f"cvl_cp_wait<{S - 2}>();", "__syncthreads();",
                     f"if (step + {S - 1} < {steps}) {{", *indent(load_b(f"(step + {S - 1}) % {S}", f"step + {S - 1}")),
                     "}", "cvl_cp_commit();", *eng.zero(), *compute]
            return ["{", f"    float (&acc){shape} = {buf};", f"    const int step_t = {t};",
                    "    {", "        const int step = step_t;", *indent(inner, 2), "    }", "}"]

        def finish(t: str, buf: str) -> list[str]:  # tile t's statistics or output, from buf
            return ["{", f"    float (&acc){shape} = {buf};", f"    const int step_t = {t};",
                    "    {", "        const int step = step_t;", *indent(epilogue, 2), "    }", "}"]

        return [f"float acc_odd{shape};  // odd column steps' accumulators",
                f"float (&acc_even){shape} = acc;  // even steps' (the inner blocks' acc names one of them)",
                *tile("0", "acc_even"),
                f"for (int step = 0; step < {steps}; step += 2) {{",
                *indent(tile("step + 1", "acc_odd")),
                *indent(finish("step", "acc_even")),
                f"    if (step + 2 < {steps}) {{", *indent(tile("step + 2", "acc_even"), 2), "    }",
                *indent(finish("step + 1", "acc_odd")),
                "}"]

    def band_statistics(self, neg_inf: str) -> list[str]:
        """Per thread: the tile's maximum of each row slot, the running sum rescaled when the
        maximum grows, then the tile's exponentials added (no shuffles)."""
        eng = self.eng
        if self.fold is not None:
            return self.band_folded_statistics(neg_inf)
        pre: list[str] = []
        w = self.walk(pre)
        x = w.value(self.softmax.args[0], self.p.layout.maps[self.softmax.args[0]])
        # fmaxf drops NaN, but a NaN reaches the row's sum (and so every value of the row)
        per_element = [f"float s = {neg_inf};", *self.guarded([*pre, f"s = {x};"]),
                       "ACC = s;", "tile_max[slot] = fmaxf(tile_max[slot], s);"]
        return [
            f"float tile_max[{eng.slots}], base[{eng.slots}];",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) tile_max[r] = {neg_inf};",
            *eng.elements("m0", "n0", per_element),
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            "    const float top = fmaxf(row_max[r], tile_max[r]);",
            f"    const float bl = __fmul_rn(top, {LOG2E});",
            f"    if (row_max[r] != top) row_sum[r] *= cvl_ex2(__fmul_rn(row_max[r], {LOG2E}) - bl);",
            "    row_max[r] = top;",
            f"    base[r] = top == {neg_inf} ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0",
            "}",
            *eng.elements("m0", "n0", [f"row_sum[slot] += {self.band_ex2(0, f'fmaf(ACC, {LOG2E}, -base[slot])')};"]),
        ]

    def band_folded_statistics(self, neg_inf: str) -> list[str]:
        """``band_statistics`` for ``softmax(acc * u)``: max(acc * u) is |u| * max(acc) (of -acc when u < 0;
        rounding is monotonic, so it is the maximum of the rounded products), and the exponent is one FMA."""
        eng = self.eng

        def tile_max(sign: str) -> list[str]:
            return eng.elements("m0", "n0", [f"tile_max[slot] = fmaxf(tile_max[slot], {sign}ACC);"])

        scan = tile_max("") if not self.fold else [
            "if (band_flip) {", *indent(tile_max("-")), "} else {", *indent(tile_max("")), "}"]
        return [
            f"float tile_max[{eng.slots}], base[{eng.slots}];",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) tile_max[r] = {neg_inf};",
            *scan,
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            "    const float top = fmaxf(row_max[r], band_abs * tile_max[r]);",
            f"    const float bl = __fmul_rn(top, {LOG2E});",
            f"    if (row_max[r] != top) row_sum[r] *= cvl_ex2(__fmul_rn(row_max[r], {LOG2E}) - bl);",
            "    row_max[r] = top;",
            f"    base[r] = top == {neg_inf} ? 0.0f : bl;",
            "}",
            *eng.elements("m0", "n0", [f"row_sum[slot] += {self.band_ex2(0, 'fmaf(ACC, band_c, -base[slot])')};"]),
        ]

    def band_stsm(self) -> bool:
        """ROW_BAND_TUNING "stsm" (sm_90 and newer, an even number of n8 tiles a warp)."""
        return (bool(ROW_BAND_TUNING.get("stsm", False)) and configs.arch_number(self.k.arch) >= 90
                and self.eng.ni % 2 == 0)

    def band_stage_tile(self, so: str, lds: int, pair: str, pack: str) -> list[str]:
        """The warp's output tile (16-bit pairs of the accumulators) into its staging rows: a 4-byte
        store per pair, or with "stsm" one stmatrix.x4 per two n8 tiles of an m16 tile (the two row
        halves of each), a quarter of the store instructions."""
        eng = self.eng
        if not self.band_stsm():
            return ["#pragma unroll", f"for (int mi = 0; mi < {eng.mi}; ++mi)",
                    "#pragma unroll", f"for (int ni = 0; ni < {eng.ni}; ++ni)",
                    "#pragma unroll", "for (int h = 0; h < 2; ++h)",
                    f"    *reinterpret_cast<{pair}*>({so} + (wm + mi * 16 + h * 8 + lane / 4) * {lds} + ni * 8 + lane % 4 * 2) =",
                    f"        {pack}(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);"]

        def word(ni: str, h: int) -> str:
            return (f"cvl_pack_bits({pack}(acc[mi][{ni}][{h * 2}], acc[mi][{ni}][{h * 2 + 1}]))")

        return [
            "{",
            "    // matrix j = lane / 8: rows (j % 2) * 8 + lane % 8 of the m16 tile, columns of n8 tile 2 * nj + j / 2",
            f"    const unsigned st_lane = cvl_smem_addr({so}) + ((wm + (lane / 8) % 2 * 8 + lane % 8) * {lds}"
            " + lane / 16 * 8) * 2;",
            "#pragma unroll", f"    for (int mi = 0; mi < {eng.mi}; ++mi)",
            "#pragma unroll", f"    for (int nj = 0; nj < {eng.ni // 2}; ++nj)",
            f"        cvl_stsm_x4(st_lane + (mi * 16 * {lds} + nj * 16) * 2, {word('2 * nj', 0)},",
            f"                    {word('2 * nj', 1)}, {word('2 * nj + 1', 0)}, {word('2 * nj + 1', 1)});",
            "}",
        ]

    def band_ex2(self, stage: int, x: str) -> str:
        """2^x of one accumulator element in pass ``stage`` (0 statistics, 1 write): the MUFU, or for
        ROW_BAND_TUNING "poly"'s share of the elements the FMA pipe (``ni`` and ``q`` are unrolled
        constants, so the choice is made at compile time)."""
        share = int(self.poly[stage])
        if share <= 0:
            return f"cvl_ex2({x})"
        if share >= 8:
            return f"cvl_ex2_fma({x})"
        return f"((ni * 2 + q) % 8 < {share} ? cvl_ex2_fma({x}) : cvl_ex2({x}))"

    def band_merge(self) -> list[str]:
        """After the last column tile: the four lanes of each row merge maxima and sums."""
        eng = self.eng
        # the sum is of 2^(x * log2(e) - rnd(max * log2(e))) = e^(x - max) * 2^err, err the rounding
        # of the base: the write pass divides the same factor out (softmax) or subtracts it (log_softmax)
        log = self.k.lang.function("log", self.dtype)
        norm = ("1.0f / total" if self.softmax.op == "softmax"
                else f"{log}(total) - fmaf(top, {LOG2E}, -row_base[r]) * 0.6931471805599453f")
        # fold_log: 2^(acc * c - base - log2(sum)) is the softmax value; row_norm is unused
        last = (["    row_base[r] = __fadd_rn(row_base[r], log2f(total));"] if self.fold_log
                else [f"    row_norm[r] = {norm};"])
        return [
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    const float top = cvl_warp_max(row_max[r], {eng.row_lanes});",
            f"    row_base[r] = __fmul_rn(top, {LOG2E});",
            "    const float part = row_max[r] == top ? row_sum[r]",
            f"                       : row_sum[r] * cvl_ex2(__fmul_rn(row_max[r], {LOG2E}) - row_base[r]);",
            f"    const float total = cvl_warp_sum(part, {eng.row_lanes});",
            "    row_max[r] = top;", *last, "}",
        ]

    def band_write(self) -> list[str]:
        k, eng = self.k, self.eng
        staged = self.staged_store()
        if staged is None:
            lines: list[str] = []
            w = self.walk(lines, ("row_max", "row_norm"))
            for s in self.p.stores:
                lines += k.store_lines(s, w.value(s.value, s.map), self.coord)
            return eng.elements("m0", "n0", self.guarded(lines))
        pre: list[str] = []
        w = self.walk(pre, ("row_max", "row_norm"), unrounded_softmax=staged.value == self.softmax.out)
        value = w.value(staged.value, staged.map)
        out = self.k.dtype(staged.value)
        ost = STORAGE[out]
        pair, pack = ("__half2", "__floats2half2_rn") if out is DType.F16 else ("__nv_bfloat162", "__floats2bfloat162_rn")
        lds = eng.bn + 8
        per_row = eng.bn // 8
        iters = eng.w.warp_m * per_row // 32
        target = f"{k.names[staged.value]}[{k.offset(staged.value, staged.map, self.coord)}]"
        store = (f"__stcs(reinterpret_cast<uint4*>(&{target}), "
                 f"*reinterpret_cast<const uint4*>(so + (wm + r) * {lds} + c % {per_row} * 8));")
        guard = " && ".join(([f"m < {self.M}"] if self.M % eng.bm else []) + ([f"n < {self.N}"] if self.N % eng.bn else []))
        if self.stream:  # one output pointer per tile, the rows of later chunks at constant offsets
            rows = 32 // per_row
            rank = len(self.p.domain)
            st_m = next((st for d, st in zip(staged.map, self.p.strides(staged.value)) if d == rank - 2), 0)
            tests = ([f"m + i * {rows} < {self.M}"] if self.M % eng.bm else []) + ([f"n < {self.N}"] if self.N % eng.bn else [])
            store = (f"__stcs(reinterpret_cast<uint4*>(orow + i * {rows * st_m}), "
                     f"*reinterpret_cast<const uint4*>(srow + i * {rows * lds}));")
            copy = [f"const int m = m0 + wm + lane / {per_row};", f"const int n = n0 + lane % {per_row} * 8;",
                    f"{ost}* const orow = &{target};",
                    f"const {ost}* const srow = so + (wm + lane / {per_row}) * {lds} + lane % {per_row} * 8;",
                    "#pragma unroll", f"for (int i = 0; i < {iters}; ++i)",
                    f"    {'if (' + ' && '.join(tests) + ') ' if tests else ''}{store}"]
        else:
            copy = staged_rows_copy("m0 + wm", per_row, iters, guard, store)
        return [
            *eng.elements("m0", "n0", self.guarded([*pre, f"ACC = {value};"])),
            f"{ost}* const so = reinterpret_cast<{ost}*>(cvl_smem);  // the warp's rows of the band",
            "__syncwarp();  // the warp's previous tile is out of the staging rows",
            *self.band_stage_tile(so="so", lds=lds, pair=pair, pack=pack),
            "__syncwarp();",
            *copy,
        ]


def staged_rows_copy(first_row: str, per_row: int, iters: int, guard: str, store: str) -> list[str]:
    """A warp's staged output rows to memory: 16-byte chunk ``c`` of the 32 lanes' ``iters`` passes
    is row ``r = c / per_row`` (output row ``m = first_row + r``), columns ``n..n + 7``; ``store``
    writes it (under ``guard`` when there is one)."""
    return ["#pragma unroll", f"for (int i = 0; i < {iters}; ++i) {{",
            "    const int c = i * 32 + lane;", f"    const int r = c / {per_row};",
            f"    const int m = {first_row} + r;", f"    const int n = n0 + c % {per_row} * 8;",
            *(indent([f"if ({guard}) {store}"]) if guard else indent([store])), "}"]


STSM_HELPER = r"""
// stmatrix: four 8x8 b16 matrices to shared memory, register i of every lane holding matrix i's
// elements (row lane / 4, columns lane % 4 * 2, + 1), the layout of an mma C fragment; lane l gives
// the address of row l % 8 of matrix l / 8 (sm_90)
__device__ __forceinline__ void cvl_stsm_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
"""


def _band_tuned(config):
    """``config`` with :data:`ROW_BAND_TUNING`'s tile and launch bounds (a spec's own settings win)."""
    from dataclasses import replace as _replace

    over = set(config.overridden)
    if "tile" in ROW_BAND_TUNING and not over & {"tile", "block"}:
        bm, bn, threads = ROW_BAND_TUNING["tile"]
        config = _replace(config, tile_m=bm, tile_n=bn, block=threads, overridden=(*config.overridden, "tile"))
    if "min_blocks" in ROW_BAND_TUNING and "launch_bounds" not in over:
        config = _replace(config, min_blocks=int(ROW_BAND_TUNING["min_blocks"]),
                          overridden=(*config.overridden, "launch_bounds"))
    return config


def row_band_engine(g: _GemmKernel) -> str:
    """"lagged", "cluster", "wgmma" or "mma": the engine of row band ``g`` (see CLUSTER_CTAS_PER_SM)."""
    from cuvil_dsl.codegen import cuda_band_cluster  # it builds on this module

    if MMA_ONLY_TUNING & ROW_BAND_TUNING.keys() or not g.band_wgmma_operands(cuda_band_cluster.MAX_DEPTH):
        return "mma"
    deep = not g.band_wgmma_operands()  # K over 64: the cluster bands only (their tiles span K in 64-wide atoms)
    cluster = cuda_band_cluster.applies(g)
    if "cluster" in ROW_BAND_TUNING and cluster:
        return "cluster"
    if "wgmma" in ROW_BAND_TUNING:
        return "mma" if deep else "wgmma"
    if "cluster" in ROW_BAND_TUNING:
        return "mma"
    if cluster and cuda_band_cluster.layout(g.N)[0] >= LAGGED_CLUSTER_CTAS:
        return "lagged"
    sms = g.k.sm_count
    wgmma = g.batch * -(-g.M // 128) >= WGMMA_BANDS_PER_SM * sms and not deep
    if cluster and cuda_band_cluster.grid_ctas(g) <= (CLUSTER_CTAS_PER_SM if wgmma else CLUSTER_CTAS_PER_SM_NO_WGMMA) * sms:
        return "cluster"
    return "wgmma" if wgmma else "mma"


def render(k: CudaKernel, entry: str) -> Emitted:
    from cuvil_dsl.codegen import cuda_band_cluster

    g = _GemmKernel(k)
    if g.band:
        engine = row_band_engine(g)
        if engine == "cluster":
            return cuda_band_cluster.render(g, entry, *ROW_BAND_TUNING.get("cluster", ()))
        if engine == "lagged":
            return cuda_band_cluster.render(g, entry, fill=LAGGED_FILL, lag=True)
        return g.render_band_wgmma(entry) if engine == "wgmma" else g.render_band(entry)
    return g.render_softmax(entry) if g.softmax is not None else g.render_plain(entry)
