"""``softmax(A @ B^T ...)`` in one pass over the logits: the row band split over a cluster of CTAs.

The two-pass row band (:mod:`cuvil_dsl.codegen.cuda_matmul`) computes every logit twice, with two
exps each: once for the row statistics, once for the output. Here each logit is computed and
exponentiated once, and the numerators wait on chip for the row's statistics:

* a **cluster** of ``C`` CTAs (``__cluster_dims__``, at most the portable 8) shares a band of
  ``64 * G`` rows (``G`` consumer warpgroups); CTA ``r`` owns ``T`` column tiles of 64
  (``T <= 4``), so N is at most ``8 * 4 * 64 = 2048``; ROW_BAND_TUNING "cluster_tiles" changes T (up
  to :data:`MOST_TILES` = 8 for the lagged band, 2 CTAs a multiprocessor: N = 2048 in clusters of 4, and
  up to 4096 in clusters of 8; an A/B of session 36, not yet measured);
* TMA brings the A band and all ``T`` B tiles at once (one mbarrier each); tile ``t + 1``'s wgmma
  runs while tile ``t``'s epilogue does (two accumulator sets);
* K (attention's head dimension) up to :data:`MAX_DEPTH` (128) is held in atoms of 64: each atom of
  a tile is one TMA box of 128-byte rows and 4 wgmma k steps (D 128 [16, 2048, 2048] on the H200:
  77.1 us, against 578.8 when it fell to the generic template and Triton's 145.1; session 13);
* tile ``t``'s epilogue: its row maxima, the thread's running maximum and sum (rescaled when the
  maximum grows, as in the two-pass band), and the numerators ``2^(x - b_t)`` kept in registers
  as f16 pairs, with ``b_t`` the thread's base after tile ``t``. With lazy bases (``LAZY``, the
  lagged band where the scale folds) the tiles after the first skip the maximum and keep the
  rows' bases, as long as each thread's part of a row's sum over the tile stays below 16 (so is
  every numerator, and a row's sum below 2^11, as with the maximum); otherwise the warp takes the
  tile again with it;
* after the last tile: the four lanes of a row merge their statistics, each CTA publishes its
  rows' ``(max, sum)`` in shared memory, and after a cluster barrier every CTA reads all ``C``
  (distributed shared memory) and merges them the same way, to the row's base ``b`` and sum ``L``;
* the write: each numerator times ``2^(b_t - b) / L``, rounded to the output type, staged per warp
  in shared memory (``stmatrix``) and stored as coalesced 16-byte streaming stores. For an f16
  output the factor is rounded to f16 and a pair of numerators scaled by one ``HMUL2``; otherwise
  the pair is scaled in f32.

With clusters of 4 CTAs or more the exchange lags a band (:meth:`_ClusterBand.lagged`, chosen by
``cuda_matmul.row_band_engine``): persistent clusters push each band's statistics with ``st.async``
onto the peers' mbarriers and write the band one round later, from numerators staged in shared
memory, so no CTA waits at a cluster barrier per band (that wait, for the slowest of 8 CTAs, cost
the barrier variant 39% of its time on attention_f16; benchmarks/NOTES.md). There the four lanes
of a row share one base per tile (the tile's maximum is merged across them first), so a band's
factors are one per row and tile: a table in shared memory that the 16-byte store loop applies
while it stores, in one piece after each column tile of the next band (the stores spread over the
band instead of one burst); each piece writes one column tile, whose staged columns then take the
new band's numerators of that tile at once (no band's numerators wait in registers). A row's
statistics travel as one float, ``l = b + log2(s)`` (its base and the log2 of its sum of ``2^(x - b)``
over the CTA's columns); the row's base is then the largest ``l`` and its sum that of
``2^(l_q - base)``. The exchange is split across a row's four lanes (``QUAD_MERGE``): each pushes the
row's statistics to a quarter of the peers and merges a quarter of theirs, two shuffles merge the
four (each sender's rows padded by ``PART_PAD`` floats, so the four lanes read four banks). Loads run a band ahead (``PREFETCH``): the A band has two buffers (the next band's loads while
this one computes) and each B slot of the ring takes the next band's tile as soon as this band is
done with it. The pieces of the write go out in four chunks among the lazy exps of tiles 1-3, their
stores predicated rather than branched around, so that the scheduler spreads them (``INTERLEAVE``):
piece t in tile t's pass, and piece 0 (whose statistics are waited for after tile 0) in tile 1's
too, tile 0's numerators staged after tile 1 (``INTERLEAVE0``). Every store of a band's pieces goes
through one output pointer at constant offsets (``OUT_BASE``). The wgmma take A from registers
(``A_REGS``): each warp loads its 16 rows of the A band once a band (4 ``ldmatrix`` x4 of the
swizzled tile TMA wrote) instead of every tile's wgmma reading the band from shared memory, 24 of the
about 160 KB a CTA's band moves through the multiprocessor's L1/shared data path, which the write's
staging, loads and stores share. A cluster barrier after the set up
keeps every push from a peer's uninitialised mbarrier; none is needed before leaving (``EXIT_SYNC``):
a CTA's last write waits for the last band's statistics, so every push into it has landed, and no
CTA pushes after its loop.

Rounding: the numerator (below 16) is rounded to f16 once (relative error 2^-11, values below 2^-24
flush to 0, an absolute error under 6e-8); for an f16 output the factor (at most 1) and the product
are rounded to f16 too (each relative 2^-11, or absolute 2^-25 below f16's normal range, which the
numerator can scale by up to 16), so the result is within 3 * 2^-11 (1.5e-3, 1.5 units in the last
place) of the exact value, plus 2^-20 absolutely (tests/codegen/test_row_band.py emulates it); for
bf16 the scaling is in f32 before the output's own rounding. The rest is the two-pass band's (see
its docstring). F32 outputs never take this path.

Masked columns (``-inf``) and NaN follow the two-pass band: a row whose values are all ``-inf``
gives NaN (0 / 0) as NumPy does, a NaN anywhere in a row reaches its sum and so the whole row.
Columns past N (a ragged last tile, or whole tiles of the last CTA) are masked; rows past M are
computed and not stored.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cuvil_dsl.codegen import cuda_wgmma
from cuvil_dsl.codegen.cuda import Emitted, element_count, indent
from cuvil_dsl.codegen.cuda_matmul import BAND_HELPERS, BAND_STREAM_HELPER, LOG2E, STSM_HELPER, STSM_PACK
from cuvil_dsl.types import DType

MAX_CLUSTER = 8  # CTAs: the portable cluster size on sm_90
MAX_TILES = 4  # column tiles of 64 a CTA keeps: 16 registers of f16 pairs each
# The most ROW_BAND_TUNING "cluster_tiles" may ask for: the lagged band stages each tile's numerators as soon as its
# statistics are done, so its tiles cost shared memory (8 tiles: 66 KB of staged rows, 2 CTAs a multiprocessor), not
# registers; the barrier variant keeps a band's numerators in registers and spills past MAX_TILES.
MOST_TILES = 8
LAZY = True  # (lagged band) a tile after a band's first keeps the rows' bases while its numerators stay small
QUAD_MERGE = True  # (lagged band) a row's four lanes split the pushes to and the merge of the peers
PREFETCH = True  # (lagged band) two A buffers; the next band's A and B tiles loaded as soon as their slots free
INTERLEAVE = True  # (lagged band) a later tile's write piece in chunks between its lazy exps
INTERLEAVE0 = True  # (lagged band, interleave) the first piece's chunks in tile 1's lazy pass too
PART_PAD = 8  # (lagged band) floats after each sender's rows of statistics (a row's four lanes read 4 banks, not 1)
OUT_BASE = True  # (lagged band) one output pointer a band for the write pieces; chunks at constant offsets
EXIT_SYNC = False  # (lagged band) a cluster barrier before leaving (not needed: the last write waits for every push)
A_REGS = True  # (lagged band) wgmma with A from registers: each warp's rows of the A band loaded once a band by ldmatrix

CLUSTER_HELPERS = r"""
// the CTAs of a cluster: the two halves of its barrier, and a float2 in another CTA's shared memory
__device__ __forceinline__ void cvl_cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cvl_cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ float2 cvl_cluster_ld2(unsigned local, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}
"""


PUSH_HELPER = r"""
// st.async of x to the same shared address in CTA `rank`, completing 4 bytes on that CTA's mbarrier `bar`
__device__ __forceinline__ void cvl_cluster_push(unsigned local, unsigned bar, unsigned rank, float x) {
    unsigned ra, rb;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(local), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(rb) : "r"(bar), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n"
                 :: "r"(ra), "f"(x), "r"(rb) : "memory");
}
// log2(x), approximate (lg2.approx: -inf for 0, NaN for NaN)
__device__ __forceinline__ float cvl_lg2(float x) {
    float y;
    asm("lg2.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
"""


STORE_IF_HELPER = r"""
// a 16-byte streaming store under a predicate (no branch around it)
__device__ __forceinline__ void cvl_stcs128_if(uint4* at, uint4 v, bool ok) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n@p st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n}\n"
                 :: "l"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"((unsigned)ok) : "memory");
}
"""


SCALE_HELPERS = r"""
// f16 pairs as their 32 bits: x in both halves (round to nearest), and a * b per half (HMUL2)
__device__ __forceinline__ unsigned cvl_half2_bits(float x) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ unsigned cvl_hmul2_bits(unsigned a, unsigned b) {
    unsigned r;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
// 16 and 4 bytes of shared memory at a shared-window address (no generic-to-shared conversion)
__device__ __forceinline__ uint4 cvl_lds128(unsigned at) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at) : "memory");
    return v;
}
__device__ __forceinline__ unsigned cvl_lds32(unsigned at) {
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(at) : "memory");
    return v;
}
"""


# The largest K (the head dimension of attention) of the cluster bands: a tile holds K in atoms of 64
# (128 bytes a row, TMA's 128-byte swizzle), one tensor copy and 4 wgmma k steps an atom.
MAX_DEPTH = 128


NON_PORTABLE_CLUSTER = 16  # CTAs: the largest cluster sm_90 runs, once the kernel allows it (runtime/modules.py)


def layout(n: int) -> tuple[int, int] | None:
    """(CTAs a cluster, column tiles of 64 a CTA) for N columns, or None when N does not fit. ROW_BAND_TUNING
    "cluster_tiles" (at most MOST_TILES) and "cluster_max" (at most NON_PORTABLE_CLUSTER) change MAX_TILES and
    MAX_CLUSTER: fewer tiles a CTA hold fewer registers and less shared memory, in more CTAs a cluster; more
    tiles make smaller clusters, which reach more multiprocessors: only where the cluster keeps the
    LAGGED_CLUSTER_CTAS CTAs that take the lagged band (which stages each tile as it goes), else MAX_TILES."""
    from cuvil_dsl.codegen.cuda_matmul import LAGGED_CLUSTER_CTAS, ROW_BAND_TUNING

    most_tiles = min(int(ROW_BAND_TUNING.get("cluster_tiles", MAX_TILES)), MOST_TILES)
    most_ctas = min(int(ROW_BAND_TUNING.get("cluster_max", MAX_CLUSTER)), NON_PORTABLE_CLUSTER)
    tiles = -(-n // 64)
    if most_tiles > MAX_TILES and -(-tiles // most_tiles) < LAGGED_CLUSTER_CTAS:
        most_tiles = MAX_TILES
    ctas = -(-tiles // most_tiles)
    if ctas > most_ctas:
        return None
    return ctas, -(-tiles // ctas)


def applies(g) -> bool:
    """Whether the wgmma band ``g`` (a ``cuda_matmul._GemmKernel`` whose operands suit the wgmma band)
    can run in one pass: a softmax (not log_softmax) whose value is the one staged 16-bit store, and
    N within the cluster's columns."""
    staged = g.staged_store()
    return (g.softmax.op == "softmax" and staged is not None and staged.value == g.softmax.out
            and layout(g.N) is not None)


def grid_ctas(g, groups: int = 1) -> int:
    """The CTAs of band ``g``'s grid (one band of ``64 * groups`` rows for each cluster)."""
    return g.batch * -(-g.M // (64 * groups)) * layout(g.N)[0]


def render(g, entry: str, groups: int = 1, min_blocks: int | None = None, fill: float = 0.0,
           lag: bool = False, store_scaled: bool = True, spread: bool = True, stcs: bool = True) -> Emitted:
    """The kernel for band ``g`` (see the module docstring): ``groups`` warpgroups of 64 rows a CTA,
    ``min_blocks`` CTAs a multiprocessor asked of ptxas (it bounds the registers; by default 4, or 3
    when the softmax's argument is walked per element; with ``lag`` 3, or 2); ``fill`` > 0 makes the
    clusters persistent, that share of the clusters that fit on the device at once; ``lag``
    (persistent clusters of one warpgroup a CTA, at least 2 CTAs a cluster) exchanges a band's
    statistics while the next band computes (:meth:`_ClusterBand.lagged`); ``store_scaled`` scales the
    numerators on their way out: for an f16 output by an f16 factor, a pair per ``HMUL2`` (instead of
    converting each pair to f32, scaling and rounding it back), and in the lagged band inside the
    16-byte store loop, from a table of one factor per row and column tile (instead of a pass over
    the staged numerators in shared memory). ``spread`` (lagged, ``store_scaled``) cuts the store loop
    of the previous band into one piece after each column tile's statistics instead of one loop after
    the band; ``stcs``: streaming (evict-first) stores of the output."""
    band = _ClusterBand(g, groups, min_blocks, fill, lag, store_scaled, spread, stcs)
    return band.lagged(entry) if band.lag else band.plain(entry)


class _ClusterBand:
    """One cluster band kernel being rendered: its geometry, and the pieces both variants share."""

    ACCS = ("acc_even", "acc_odd")  # even and odd column tiles' accumulators

    def __init__(self, g, groups: int, min_blocks: int | None, fill: float, lag: bool, store_scaled: bool = True,
                 spread: bool = True, stcs: bool = True):
        k, a, b = g.k, g.a, g.b
        self.g, self.k = g, k
        self.ctas, self.tiles = layout(g.N)
        self.bm, self.threads = 64 * groups, 128 * groups
        wa = cuda_wgmma.WgmmaOperand("a", "", a.dtype, a.extent, 64, True, a.stride_mn, 1)
        wb = cuda_wgmma.WgmmaOperand("b", "", b.dtype, b.extent, 64, True, b.stride_mn, 1)
        self.eng = eng = cuda_wgmma.WgmmaEngine(wa, wb, bm=self.bm, bn=64, stages=max(self.tiles, 2), pending=0,
                                                index_t=k.index_t)
        columns = self.ctas * self.tiles * 64  # the cluster's columns, N rounded up
        g.eng, g.poly, g.stream = eng, (0, 0), False
        g.mt, g.nt = -(-g.M // self.bm), self.ctas * self.tiles
        g.fold = g.band_fold() if columns == g.N else None  # no masked column
        self.lag = lag and self.ctas > 1 and groups == 1 and fill > 0
        if self.tiles > MAX_TILES and not self.lag:  # the barrier band keeps a band's numerators in registers
            raise ValueError(f"ROW_BAND_TUNING cluster_tiles: {self.tiles} column tiles a CTA need the lagged band "
                             f"(persistent clusters of one warpgroup a CTA); the barrier band holds {MAX_TILES}")
        if min_blocks is None:  # at fewer registers these spill
            min_blocks = (3 if g.fold is not None else 2) if self.lag else (4 if g.fold is not None else 3)
            if a.depth > 64 or self.tiles > MAX_TILES:  # tiles of two atoms, or over 4 tiles' staged rows:
                min_blocks = min(min_blocks, 2)  # the lagged band's 99-105 KB allow 2 CTAs a multiprocessor
        k.config = replace(k.config, block=self.threads, max_threads=self.threads, min_blocks=min_blocks)
        batches = {o.role: (element_count(g.p.domain[:-2]) if o.batch else 1) for o in (a, b)}
        self.maps = {o.role: k.tensor_map(f"tma_{o.role}", o.buffer, (o.depth, o.extent * batches[o.role]),
                                          o.stride_mn * 2, (64, self.bm if o.role == "a" else 64)) for o in (a, b)}
        eng.maps = self.maps
        # K in atoms of 64 halves (128-byte rows): an atom of a tile is one TMA box, [rows][128 bytes]
        self.atoms = -(-a.depth // 64)
        self.atom_a, self.atom_b = self.bm * 128, 64 * 128
        self.tile_a, self.tile_b = self.atom_a * self.atoms, self.atom_b * self.atoms  # bytes
        self.ks = -(-a.depth // 16)
        self.neg_inf = k.lang.literal(-math.inf, g.dtype)
        tests = ([f"m < {g.M}"] if g.M % self.bm else []) + ([f"n < {g.N}"] if columns != g.N else [])
        self.guard = " && ".join(tests)
        self.row_a = f"{'ld_bz * ' + str(g.M) + ' + ' if a.batch else ''}ld_mt * {self.bm}"
        self.row_b = f"{'ld_bz * ' + str(g.N) + ' + ' if b.batch else ''}n_cta + " + "{t}"
        self.bands = g.batch * g.mt
        # persistent clusters (fill > 0): about `fill` of the clusters that fit at once, each taking bands
        # `clusters` apart
        resident = k.sm_count * min_blocks // self.ctas
        self.grid_clusters = min(self.bands, max(1, int(resident * fill))) if fill > 0 else self.bands
        staged = g.staged_store()
        self.pair, self.pack = (("__half2", "__floats2half2_rn") if k.dtype(staged.value) is DType.F16
                                else ("__nv_bfloat162", "__floats2bfloat162_rn"))
        self.target = f"{k.names[staged.value]}[{k.offset(staged.value, staged.map, g.coord)}]"
        self.scaled = store_scaled
        from cuvil_dsl.codegen.cuda_matmul import ROW_BAND_TUNING
        # tiles after the first without their maximum: the lagged band (in the barrier variant at 4 CTAs
        # a multiprocessor the slow path's registers spill, and small grids did not gain)
        self.lazy = bool(ROW_BAND_TUNING.get("lazy", LAZY)) and self.lag
        self.quad = bool(ROW_BAND_TUNING.get("quad_merge", QUAD_MERGE)) and self.lag  # split across a row's lanes
        self.prefetch = bool(ROW_BAND_TUNING.get("prefetch", PREFETCH)) and self.lag
        self.part_pad = int(ROW_BAND_TUNING.get("part_pad", PART_PAD))
        self.exit_sync = bool(ROW_BAND_TUNING.get("exit_sync", EXIT_SYNC))
        # timing-only ablations (wrong results; benchmarks/ab_attention.py --ablations): "store" drops the
        # output's stores, "stage" the numerators' staging (stmatrix), "sts" stores to shared memory
        # instead (no global traffic), "store_l2" keeps them inside the output's first 4 MB (L2, never
        # DRAM), "lds" stores without reading the staged numerators, "exp" computes each numerator by an
        # FFMA instead of the MUFU's exp2. They act on the write pieces after the exps (as measured), so
        # they turn the interleaved write off.
        # "timeline" (the kernel unchanged) has thread 0 of each CTA note %globaltimer at eight points (start; set
        # up; round 0 done; loop done; last write done; exit; its loads issued; past the block barrier) and its SM,
        # into 16 u64 a CTA at the output's start, at its exit; "empty" renders the kernel's launch alone (no body)
        self.ablate = frozenset(ROW_BAND_TUNING.get("ablate", ())) if self.lag else frozenset()
        self.interleave = bool(ROW_BAND_TUNING.get("interleave", INTERLEAVE)) and self.lag and not (self.ablate - {"timeline"})
        self.interleave0 = bool(ROW_BAND_TUNING.get("interleave0", INTERLEAVE0)) and self.interleave and self.tiles > 1
        self.spread, self.stcs = spread and store_scaled and self.lag, stcs
        # the pieces' stores from one pointer a band (the last band's row m0 + warp_row + pr, column
        # n_cta + 8 pq) at constant offsets, instead of each chunk's offset from the band's coordinates
        self.out_base = bool(ROW_BAND_TUNING.get("out_base", OUT_BASE)) and self.spread and "store_l2" not in self.ablate
        self.row_stride = next((st for d, st, size in zip(staged.map, g.p.strides(staged.value), g.p.shape(staged.value))
                                if d == len(g.p.domain) - 2 and size > 1), 0)  # elements from row m to m + 1
        self.half = store_scaled and self.pair == "__half2"  # the numerators scaled in f16 pairs
        # (lagged band) wgmma with A from registers: each warp's fragments of the A band loaded once a band
        # by ldmatrix, instead of every tile's wgmma reading the A band from shared memory
        self.a_regs = bool(ROW_BAND_TUNING.get("a_regs", A_REGS)) and self.lag

    # ------------------------------------------------------------------ shared pieces
    def guarded(self, body: list[str]) -> list[str]:
        return [f"if ({self.guard}) {{", *indent(body), "}"] if self.guard else body

    def wgmma(self, acc: str, wait: str, stage_bytes: int) -> list[str]:
        """A tile's wgmma into ``acc`` once ``wait`` (its B tile's mbarrier) is done; the tile at ``stage_bytes``."""
        db = f"desc_b + (({stage_bytes} + {self.k_bytes(self.atom_b)}) >> 4)"
        if self.a_regs:  # A from the band's fragments in registers
            first, more = f"cvl_wgmma_rs_set({acc}, afr[0], {db})", f"cvl_wgmma_rs({acc}, afr[kk], {db})"
        else:
            first, more = (f"cvl_wgmma_set({acc}, desc_a, {db})",
                           f"cvl_wgmma({acc}, desc_a + (({self.k_bytes(self.atom_a)}) >> 4), {db})")
        return [wait, "cvl_wgmma_fence();", "{", "    const int kk = 0;", f"    {first};", "}",
                "#pragma unroll", f"for (int kk = 1; kk < {self.ks}; ++kk)", f"    {more};", "cvl_wgmma_commit();"]

    def k_bytes(self, atom: int) -> str:
        """The byte offset of k step ``kk`` (16 of K) in a tile whose atoms are ``atom`` bytes apart."""
        return "kk * 32" if self.atoms == 1 else f"(kk >> 2) * {atom} + (kk & 3) * 32"

    def copies(self, role: str, row: str, bar: str, offset: int = 0, at: str | None = None) -> list[str]:
        """Thread 0's tensor copies of one tile of operand ``role`` (rows from ``row``), one a 64-wide atom
        of K, each completing on ``bar``: to shared address ``at`` (A) or ``sb + offset`` (B)."""
        atom, tmap = (self.atom_a if role == "a" else self.atom_b), self.maps[role]

        def dst(i: int) -> str:
            if at is None:
                return f"sb + {offset + i * atom}u"
            return f"{at} + {i * atom}u" if i else at

        return [f"cvl_tma_2d({dst(i)}, {tmap}, {64 * i}, {row}, {bar});" for i in range(self.atoms)]

    def a_fragments(self, at: str) -> list[str]:
        """The warp's 16 rows of the A band at shared address ``at`` (TMA's 128-byte swizzle: 16-byte chunk
        c of row r at chunk c ^ (r % 8), in atoms of 64 of K) into ``afr``, one mma A fragment a k step
        (ldmatrix x4: rows 0-7 and 8-15 of the step's two chunks)."""
        if self.atoms == 1:
            return ["#pragma unroll", f"for (int kk = 0; kk < {self.ks}; ++kk) {{",
                    "    const unsigned r = wl * 16 + lane / 8 % 2 * 8 + lane % 8, c = kk * 2 + lane / 16;",
                    f"    cvl_ldsm_x4_at(afr[kk], {at} + r * 128u + ((c ^ (r % 8)) * 16u));", "}"]
        return ["#pragma unroll", f"for (int kk = 0; kk < {self.ks}; ++kk) {{",
                "    const unsigned r = wl * 16 + lane / 8 % 2 * 8 + lane % 8, c = (kk & 3) * 2 + lane / 16;",
                f"    cvl_ldsm_x4_at(afr[kk], {at} + (kk >> 2) * {self.atom_a}u + r * 128u + ((c ^ (r % 8)) * 16u));", "}"]

    def rs_helpers(self) -> str:
        """``cvl_wgmma_rs`` / ``cvl_wgmma_rs_set``: the tile's wgmma with A from four registers a thread."""
        eng = self.eng
        n = eng.regs
        regs = ", ".join(f"%{i}" for i in range(n))
        outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
        tb = int(not eng.b.k_major)
        out = BAND_STREAM_HELPER  # cvl_ldsm_x4_at
        for name, accumulate in (("cvl_wgmma_rs", 1), ("cvl_wgmma_rs_set", 0)):
            out += f"""
// D (64 x {eng.bn}, f32) {'+=' if accumulate else '='} A (64 x 16, the warp's mma fragment in registers) * B (descriptor)
__device__ __forceinline__ void {name}(float (&d)[{n}], const unsigned (&a)[4], unsigned long long db) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 5}, 0;\\n"
                 "{eng.instruction()} {{{regs}}}, {{%{n}, %{n + 1}, %{n + 2}, %{n + 3}}}, %{n + 4}, p, 1, 1, {tb};\\n}}\\n"
                 : {outs}
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"({accumulate}));
}}
"""
        return out

    def statistics(self, t: int, during: list[str] = ()) -> list[str]:
        """Tile t: the running statistics, and its numerators into pv[t] (acc is the tile's); the lazy
        pass also carries ``during`` after each pair (the lagged band's interleaved write)."""
        g, eng, neg_inf = self.g, self.eng, self.neg_inf
        if g.fold is not None:  # max(acc * u) is |u| * max(acc), of -acc when u < 0
            def scan(sign: str) -> list[str]:
                return eng.elements("m0", "n0", [f"tile_max[slot] = fmaxf(tile_max[slot], {sign}ACC);"])

            lines = scan("") if not g.fold else ["if (band_flip) {", *indent(scan("-")), "} else {",
                                                 *indent(scan("")), "}"]
            top, scale = "band_abs * tile_max[r]", "band_c"
        else:  # the softmax's argument by the walk, -inf where masked; fmaxf drops NaN, the sum keeps it
            pre: list[str] = []
            w = g.walk(pre)
            x = w.value(g.softmax.args[0], g.p.layout.maps[g.softmax.args[0]])
            lines = eng.elements("m0", "n0", [f"float s = {neg_inf};", *self.guarded([*pre, f"s = {x};"]),
                                              "ACC = s;", "tile_max[slot] = fmaxf(tile_max[slot], s);"])
            top, scale = "tile_max[r]", LOG2E
        quad = []
        if self.lag and self.scaled:  # one base for the four lanes of a row: a factor per row and tile
            quad = ["#pragma unroll", "for (int r = 0; r < 2; ++r) {  // the tile's maximum over the row's four lanes",
                    "    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));",
                    "    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));", "}"]
        slow = [
            "float tile_max[2], base[2];", f"tile_max[0] = tile_max[1] = {neg_inf};", *lines, *quad,
            "#pragma unroll", "for (int r = 0; r < 2; ++r) {",
            f"    const float top = fmaxf(row_max[r], {top});",
            f"    const float bl = __fmul_rn(top, {LOG2E});",
            f"    if (row_max[r] != top) row_sum[r] *= cvl_ex2(__fmul_rn(row_max[r], {LOG2E}) - bl);",
            "    row_max[r] = top;",
            f"    base[r] = top == {neg_inf} ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0",
            f"    tile_base[{t}][r] = bl;  // -inf while the row is: its numerators are 0",
            "}",
            *eng.pairs("m0", "n0", [f"const float p0 = {self.ex2(f'fmaf(ACC0, {scale}, -base[slot])')};",
                                    f"const float p1 = {self.ex2(f'fmaf(ACC1, {scale}, -base[slot])')};",
                                    "row_sum[slot] += p0 + p1;",
                                    f"pv[{t}][ni * 2 + h] = __floats2half2_rn(p0, p1);"]),
        ]
        if not (self.lazy and g.fold is not None and t > 0):
            return slow
        # The rows' bases as they are (no maximum of this tile): kept when every thread's part of each
        # row's sum over the tile stays below 16, so every numerator is below 16 (f16 holds them to
        # 2^-11) and a row's sum over its 128 parts below 2^11, as with the maximum (the factors
        # 2^(b_t - b) / L stay in f16's normal range); else (a value 4 above its base, NaN or inf,
        # a row without a base yet) the warp takes the tile again with its maximum.
        return [
            "float fb[2], fpart[2];",
            f"bool fine = row_max[0] != {neg_inf} && row_max[1] != {neg_inf};",
            "#pragma unroll", "for (int r = 0; r < 2; ++r) {", f"    fb[r] = __fmul_rn(row_max[r], {LOG2E});",
            "    fpart[r] = 0.0f;", "}",
            *eng.pairs("m0", "n0", [f"const float p0 = {self.ex2('fmaf(ACC0, band_c, -fb[slot])')};",
                                    f"const float p1 = {self.ex2('fmaf(ACC1, band_c, -fb[slot])')};",
                                    "fpart[slot] += p0 + p1;",
                                    f"pv[{t}][ni * 2 + h] = __floats2half2_rn(p0, p1);",
                                    *during]),
            "fine = fine && fpart[0] < 16.0f && fpart[1] < 16.0f;  // false for NaN",
            "if (__all_sync(0xffffffffu, fine)) {",
            "#pragma unroll", "    for (int r = 0; r < 2; ++r) {",
            "        row_sum[r] += fpart[r];",
            f"        tile_base[{t}][r] = fb[r];", "    }",
            "} else {", *indent(slow), "}"]

    def ex2(self, x: str) -> str:
        """2^x of a numerator (an FFMA instead under the "exp" ablation)."""
        return f"fmaf({x}, 0.0f, 0.25f)" if "exp" in self.ablate else f"cvl_ex2({x})"

    def stage_scaled(self, pv: str, at: str) -> list[str]:
        """The tile's numerators ``pv`` times the row's factor ``sc[h]`` (f32), rounded to the output
        type, into the warp's 16 staging rows by ``stmatrix`` (``at``: the lane's address in them)."""
        if self.half:
            lines = ["const unsigned sh[2] = {cvl_half2_bits(sc[0]), cvl_half2_bits(sc[1])};"]
            scaled = f"cvl_hmul2_bits(cvl_pack_bits({pv}[q * 4 + j]), sh[j % 2])"
        else:
            lines = []
            scaled = (f"cvl_pack_bits({self.pack}(__half22float2({pv}[q * 4 + j]).x * sc[j % 2], "
                      f"__half22float2({pv}[q * 4 + j]).y * sc[j % 2]))")
        return [*lines, "#pragma unroll", "for (int q = 0; q < 4; ++q) {  // columns 16q to 16q + 15 of rows 0-7, 8-15",
                "    unsigned r[4];  // matrix j: pair j / 2 of the lane's two in those columns, row half j % 2",
                "#pragma unroll", f"    for (int j = 0; j < 4; ++j) r[j] = {scaled};",
                f"    cvl_stsm_x4({at} + q * 32, r[0], r[1], r[2], r[3]);", "}"]

    @staticmethod
    def stsm_lane(ld: int) -> str:
        """The byte offset of this lane's ``stmatrix`` row address in 16 staged rows of ``ld`` halves:
        row ``lane % 8`` of matrix ``lane / 8`` (rows 0-7, 8-15, then the next 8 columns)."""
        return f"((lane % 8 + lane / 8 % 2 * 8) * {ld} + lane / 16 * 8) * 2"

    @staticmethod
    def merge_quad() -> list[str]:
        return [
            "#pragma unroll", "for (int r = 0; r < 2; ++r) {  // the four lanes of a row",
            "    const float top = cvl_warp_max(row_max[r], 4);",
            f"    const float bl = __fmul_rn(top, {LOG2E});",
            "    const float part = row_max[r] == top ? row_sum[r]",
            f"                       : row_sum[r] * cvl_ex2(__fmul_rn(row_max[r], {LOG2E}) - bl);",
            "    row_sum[r] = cvl_warp_sum(part, 4);",
            "    row_max[r] = top;", "}"]

    def band_tiles(self, issue, refill, after=lambda t: [], during=lambda t: []) -> list[str]:
        """Every column tile of a band: tile t + 1's wgmma issued, tile t's retired, ``refill(t)`` (lines
        once tile t's shared memory is free), tile t's statistics (its lazy pass carrying ``during(t)``
        after each pair), then ``after(t)``."""
        accs, tiles = self.ACCS, self.tiles
        lines = issue(0, accs[0])
        for t in range(tiles):
            cur, nxt = accs[t % 2], accs[(t + 1) % 2]
            ahead = [*issue(t + 1, nxt), "cvl_wgmma_wait<1>();"] if t + 1 < tiles else ["cvl_wgmma_wait<0>();"]
            lines += ["{", *indent([*ahead, f"cvl_wgmma_pin({cur});", *refill(t)]),
                      f"    float (&acc)[{self.eng.regs}] = {cur};",
                      f"    const int n0 = n_cta + {t * 64};", *indent(self.statistics(t, during(t))), "}", *after(t)]
        return lines

    def band_coords(self, band: str) -> list[str]:
        g = self.g
        return [f"const int mt = (int)((unsigned)({band}) % {g.mt}u);", f"const int bz = (int)((unsigned)({band}) / {g.mt}u);",
                "(void)bz;",
                *g.batch_coords(), f"const int m0 = mt * {self.bm};"]

    def common_head(self, b_tiles: str, a_bufs: int = 1) -> list[str]:
        return [
            "extern __shared__ __align__(1024) unsigned char cvl_smem[];",
            "const unsigned smem0 = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;",
            f"const unsigned sa = smem0;  // the A band: {self.bm} rows x {64 * self.atoms} of K"
            + (f", {a_bufs} buffers" if a_bufs > 1 else ""),
            f"const unsigned sb = smem0 + {a_bufs * self.tile_a}u;  // {b_tiles}",
        ]

    def emitted(self, entry: str, body: list[str], shared: int, helpers: str, persistent: bool = False) -> Emitted:
        lines = [*self.k.signature(entry, self.threads), *indent(body), "}"]
        if self.ctas > 1:
            lines[0] = lines[0].replace("__global__ void", f"__global__ void __cluster_dims__({self.ctas}, 1, 1)", 1)
        eng = self.eng
        return Emitted(lines, (self.grid_clusters * self.ctas, 1, 1), (self.threads, 1, 1), shared,
                       eng.helpers() + eng.set_helper() + BAND_HELPERS + CLUSTER_HELPERS
                       + (STSM_HELPER + STSM_PACK + SCALE_HELPERS if self.scaled else "") + helpers, eng.options,
                       self.ctas if persistent else 0)

    # ------------------------------------------------------------------ the cluster barrier variant
    def plain(self, entry: str) -> Emitted:
        """Each band exchanges its statistics at a cluster barrier, then writes its output from the
        numerators in registers (staged per warp for 16-byte stores)."""
        g, eng, ctas, tiles, bm, neg_inf = self.g, self.eng, self.ctas, self.tiles, self.bm, self.neg_inf
        tile_a, tile_b = self.tile_a, self.tile_b
        lds = 64 + 8  # staging row, in halves (16 bytes of padding against bank conflicts)
        stage_out = (self.threads // 32) * 16 * lds * 2
        merge_cluster = [] if ctas == 1 else [
            "if (round > 0) cvl_cluster_wait();  // the cluster has read the last round's statistics",
            "if (lane % 4 == 0) {  // this CTA's statistics of its rows, for the cluster",
            "    cvl_part[row0] = make_float2(row_max[0], row_sum[0]);",
            "    cvl_part[row0 + 8] = make_float2(row_max[1], row_sum[1]);", "}",
            "cvl_cluster_arrive();", "cvl_cluster_wait();  // every CTA's statistics are in",
            "#pragma unroll", "for (int r = 0; r < 2; ++r) {",
            f"    float2 got[{ctas}];", f"    float top = {neg_inf};",
            "#pragma unroll", f"    for (int q = 0; q < {ctas}; ++q) {{",
            "        got[q] = cvl_cluster_ld2(part0 + (row0 + r * 8) * 8, q);",
            "        top = fmaxf(top, got[q].x);", "    }",
            f"    const float bl = __fmul_rn(top, {LOG2E});",
            "    float total = 0.0f;",
            "#pragma unroll", f"    for (int q = 0; q < {ctas}; ++q)",
            f"        total += got[q].x == top ? got[q].y : got[q].y * cvl_ex2(__fmul_rn(got[q].x, {LOG2E}) - bl);",
            "    row_max[r] = top;", "    row_sum[r] = total;", "}",
            "cvl_cluster_arrive();  // done reading (waited for before the next round writes, or exits)"]
        copy = ["#pragma unroll", "for (int i = 0; i < 4; ++i) {  // 16 rows of 8 chunks of 16 bytes",
                "    const int c = i * 32 + lane;", "    const int m = m0 + warp_row + c / 8;",
                "    const int n = n0 + c % 8 * 8;",
                *indent(self.guarded([f"__stcs(reinterpret_cast<uint4*>(&{self.target}), "
                                      f"*reinterpret_cast<const uint4*>(so + c / 8 * {lds} + c % 8 * 8));"])), "}"]

        def write(t: int) -> list[str]:
            head = [f"const int n0 = n_cta + {t * 64};",
                    "float sc[2];", "#pragma unroll",
                    f"for (int r = 0; r < 2; ++r) sc[r] = cvl_ex2(tile_base[{t}][r] - fin_base[r]) * inv_sum[r];",
                    "__syncwarp();  // the warp's previous tile is out of its staging rows"]
            if self.scaled:
                return [*head, *self.stage_scaled(f"pv[{t}]", "so_st"), "__syncwarp();", *copy]
            return [*head,
                    "#pragma unroll", "for (int ni = 0; ni < 8; ++ni)",
                    "#pragma unroll", "for (int h = 0; h < 2; ++h) {  // columns ni * 8 + lane % 4 * 2, + 1 of row h",
                    f"    const float2 v = __half22float2(pv[{t}][ni * 2 + h]);",
                    f"    *reinterpret_cast<{self.pair}*>(so + (lane / 4 + h * 8) * {lds} + ni * 8 + lane % 4 * 2) = "
                    f"{self.pack}(v.x * sc[h], v.y * sc[h]);", "}",
                    "__syncwarp();", *copy]

        def load(band: str) -> list[str]:  # thread 0: the A band and this CTA's B tiles of band `band`
            return ["{", f"    const int ld_mt = ({band}) % {g.mt};", f"    const int ld_bz = ({band}) / {g.mt};",
                    "    (void)ld_bz;",
                    f"    cvl_mbar_expect_tx(full0 + {tiles * 8}, {tile_a}u);",
                    *indent(self.copies("a", self.row_a, f"full0 + {tiles * 8}", at="sa")),
                    *[line for t in range(tiles) for line in (
                        f"    cvl_mbar_expect_tx(full0 + {t * 8}, {tile_b}u);",
                        *indent(self.copies("b", self.row_b.format(t=t * 64), f"full0 + {t * 8}", t * tile_b)))],
                    "}"]

        def issue(t: int, acc: str) -> list[str]:
            return self.wgmma(acc, f"cvl_mbar_wait(full0 + {t * 8}, parity);", t * tile_b)

        def refill(t: int) -> list[str]:  # after the band's last wgmma: the next band's tiles
            if t + 1 < tiles:
                return []
            return ["__syncthreads();  // every warpgroup is past its last wgmma of this band",
                    f"if (threadIdx.x == 0 && band + clusters < {self.bands}) {{", *indent(load("band + clusters")), "}"]

        band_body = [
            *self.band_coords("band"),
            "const unsigned parity = round & 1;  // of every barrier's phase this round",
            *g.band_state(neg_inf),
            f"cvl_mbar_wait(full0 + {tiles * 8}, parity);  // the band is in",
            *self.band_tiles(issue, refill),
            *self.merge_quad(), *merge_cluster,
            "float fin_base[2], inv_sum[2];", "#pragma unroll", "for (int r = 0; r < 2; ++r) {",
            f"    fin_base[r] = __fmul_rn(row_max[r], {LOG2E});", "    inv_sum[r] = 1.0f / row_sum[r];", "}",
        ]
        for t in range(tiles):
            band_body += ["{", *indent(write(t)), "}"]
        body = [
            *self.common_head(f"{tiles} B tiles of 64 rows"),
            f"{eng.storage}* const so = reinterpret_cast<{eng.storage}*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem))"
            f" + {tile_a + tiles * tile_b}) + (threadIdx.x / 32) * {16 * lds};  // this warp's 16 staging rows",
            "const int lane = threadIdx.x % 32;", "const int wg = threadIdx.x / 128;", "const int wl = (threadIdx.x / 32) % 4;",
            "const int warp_row = wg * 64 + wl * 16;  // the warp's first row in the band",
            "const int row0 = warp_row + lane / 4;  // the thread's first row",
            *([f"const unsigned so_st = cvl_smem_addr(so) + {self.stsm_lane(lds)};  // this lane's stmatrix row"]
              if self.scaled else []),
            "const unsigned long long desc_a = cvl_wgmma_desc(sa + wg * 8192u, 16u, 1024u);",
            "const unsigned long long desc_b = cvl_wgmma_desc(sb, 16u, 1024u);",
            f"float acc_even[{eng.regs}], acc_odd[{eng.regs}];  // even and odd column tiles",
            f"__half2 pv[{tiles}][{eng.regs // 2}];  // the numerators of each tile, rounded to f16",
            f"float tile_base[{tiles}][2];  // the thread's base of each row after each tile",
            f"__shared__ __align__(8) unsigned long long cvl_full[{tiles + 1}];  // B tiles, then A",
            "const unsigned full0 = cvl_smem_addr(cvl_full);",
            *([f"__shared__ float2 cvl_part[{bm}];  // the CTA's (max, sum) of each row",
               "const unsigned part0 = cvl_smem_addr(cvl_part);"] if ctas > 1 else []),
            f"const int n_cta = blockIdx.x % {ctas} * {tiles * 64};  // the cluster rank's columns",
            f"const int clusters = gridDim.x / {ctas};",
            "if (threadIdx.x == 0) {",
            f"    for (int s = 0; s <= {tiles}; ++s) cvl_mbar_init(full0 + s * 8, 1);",
            "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");",
            *indent(load(f"blockIdx.x / {ctas}")),
            "}",
            "__syncthreads();",
            "#pragma unroll 1",
            f"for (int band = blockIdx.x / {ctas}, round = 0; band < {self.bands}; band += clusters, ++round) {{",
            *indent(band_body),
            "}",
        ]
        if ctas > 1:
            body.append("cvl_cluster_wait();  // no CTA leaves while another may read its statistics")
        return self.emitted(entry, body, tile_a + tiles * tile_b + stage_out + 1024, "")

    # ------------------------------------------------------------------ the lagged variant
    def lagged(self, entry: str) -> Emitted:
        """Persistent clusters whose statistics exchange lags a band. Round ``r`` computes band ``r``
        (B tiles through a ring of two TMA slots and, with ``prefetch``, the A band through two buffers:
        three CTAs still fit a multiprocessor) and writes band
        ``r - 1``, whose statistics the cluster pushed (``st.async`` onto each CTA's mbarrier,
        double-buffered by round) while band ``r`` computed, from the numerators it staged in shared
        memory: with ``spread``, after tile t's statistics the piece of band ``r - 1`` in tile t's
        columns, then tile t's numerators staged there; then it pushes band ``r``'s statistics. No CTA
        waits for its cluster except once at the start and once at the end."""
        g, eng, ctas, tiles, bm, neg_inf = self.g, self.eng, self.ctas, self.tiles, self.bm, self.neg_inf
        tile_a, tile_b = self.tile_a, self.tile_b
        prow = bm + self.part_pad  # floats from one sender's statistics to the next
        ldp = tiles * 64 + 8  # a staged row of numerators, in halves (16 bytes of padding)
        per_row = tiles * 8  # 16-byte chunks of a staged row
        fs = max(tiles, MAX_TILES)  # a row's factors in the warp's table (one a tile)
        loads = [len(range(s, tiles, 2)) for s in (0, 1)]  # B loads of each ring slot a band
        a_bytes, bars = (2 * tile_a, 4) if self.prefetch else (tile_a, 3)  # A buffers; mbarriers (2 B slots, A)

        def issue(t: int, acc: str) -> list[str]:
            slot = t % 2
            wait = f"cvl_mbar_wait(full0 + {slot * 8}, (round * {loads[slot]} + {t // 2}) & 1);"
            return self.wgmma(acc, wait, slot * tile_b)

        prefetch = self.prefetch
        timeline = "timeline" in self.ablate

        def load(band: str, what: list[int], a: str | None) -> list[str]:
            """Thread 0: B tiles ``what`` of ``band``, and its A band when ``a`` (into A buffer ``a``
            with ``prefetch``)."""
            lines = ["{", f"    const int ld_mt = ({band}) % {g.mt};", f"    const int ld_bz = ({band}) / {g.mt};",
                     "    (void)ld_bz;"]
            if a is not None:
                at, bar = (f"sa + ({a}) * {tile_a}u", f"full0 + 16 + ({a}) * 8") if prefetch else ("sa", "full0 + 16")
                lines += [f"    cvl_mbar_expect_tx({bar}, {tile_a}u);", *indent(self.copies("a", self.row_a, bar, at=at))]
            for t in what:
                lines += [f"    cvl_mbar_expect_tx(full0 + {t % 2 * 8}, {tile_b}u);",
                          *indent(self.copies("b", self.row_b.format(t=t * 64), f"full0 + {t % 2 * 8}", t % 2 * tile_b))]
            return lines + ["}"]

        def refill(t: int) -> list[str]:
            if t + 2 < tiles:  # tile t's slot takes tile t + 2
                return ["__syncthreads();  // the warpgroup is past tile t's wgmma",
                        "if (threadIdx.x == 0) {", *indent(load("band", [t + 2], None)), "}"]
            if prefetch:  # slot t % 2 is done with this band: the next band's tile t % 2; after the last
                # tile this band's A buffer takes the A band two rounds on
                lines = ["__syncthreads();  // the warpgroup is past tile t's wgmma",
                         f"if (threadIdx.x == 0 && band + clusters < {self.bands}) {{",
                         *indent(load("band + clusters", [t % 2], None)), "}"]
                if t + 1 == tiles:
                    lines += [f"if (threadIdx.x == 0 && band + 2 * clusters < {self.bands}) {{",
                              *indent(load("band + 2 * clusters", [], "round & 1")), "}"]
                return lines
            if t + 1 == tiles:  # the A band and both slots take the next band's first tiles
                return ["__syncthreads();  // the warpgroup is past the band's last wgmma",
                        f"if (threadIdx.x == 0 && band + clusters < {self.bands}) {{",
                        *indent(load("band + clusters", list(range(min(2, tiles))), "0")), "}"]
            return []

        def factors() -> list[str]:
            """The factors of tiles lane % 4 + 4i for the lane's two rows into the warp's table (the rows'
            bases are the same in their four lanes)."""
            factor = "cvl_half2_bits" if self.half else "__float_as_uint"
            lines = []
            for first in range(0, tiles, 4):  # this lane's tile of tiles first to first + 3
                pick = [f"float pb0 = prev_base[{first}][0], pb1 = prev_base[{first}][1];"]
                for t in range(first + 1, min(first + 4, tiles)):
                    pick.append(f"if (lane % 4 == {t - first}) pb0 = prev_base[{t}][0], pb1 = prev_base[{t}][1];")
                n, col = min(4, tiles - first), "lane % 4" + (f" + {first}" if first else "")
                lines += ["{", *indent(pick), *indent([f"if (lane % 4 < {n}) {{"] if n < 4 else ["{"]),
                          f"        sf[(lane / 4) * {fs} + {col}] = {factor}(cvl_ex2(pb0 - fin_base[0]) * inv_sum[0]);",
                          f"        sf[(lane / 4 + 8) * {fs} + {col}] = {factor}(cvl_ex2(pb1 - fin_base[1]) * inv_sum[1]);",
                          "    }", "}"]
            return lines + ["__syncwarp();  // the warp's factors are in"]

        def scaled_copy(lo, hi, tile: int | None = None, predicated: bool = False) -> list[str]:
            """Chunks ``i * 32 + lane`` (lo <= i < hi; ``hi - lo`` folds to a constant) of the staged
            numerators times their factors, stored: of the warp's rows (``per_row`` chunks of 16 bytes
            each), or of column tile ``tile`` only (8 chunks a row)."""
            at = f"reinterpret_cast<uint4*>(&{self.target})"
            if tile is None:
                factor = f"sf[c / {per_row} * {fs} + c % {per_row} / 8]"
                head = [f"    const int c = ({lo} + j) * 32 + lane;", f"    const int m = m0 + warp_row + c / {per_row};",
                        f"    const int n = n_cta + c % {per_row} * 8;"]
                staged = f"pw + c / {per_row} * {ldp} + c % {per_row} * 8"
            else:  # rows 4j + pr of the warp's 16, chunk pq of the tile's 8: per-lane bases, constant steps
                factor = f"cvl_lds32(sf_rd + (({lo} + j) * {4 * fs} + {tile}) * 4)"
                head = [f"    const int m = m0 + warp_row + ({lo} + j) * 4 + pr;",
                        f"    const int n = n_cta + ({tile * 8} + pq) * 8;"]
                staged = f"pw_rd + (({lo} + j) * {4 * ldp} + {tile * 64}) * 2"
                if self.out_base:  # 16-byte steps from the band's pointer: rows 4j on, tile's columns on
                    at = f"out_prev + ({lo} + j) * {4 * self.row_stride // 8} + {tile * 8}"
            if self.half:
                store = [f"const unsigned f = {factor};",
                         "v.x = cvl_hmul2_bits(v.x, f);", "v.y = cvl_hmul2_bits(v.y, f);",
                         "v.z = cvl_hmul2_bits(v.z, f);", "v.w = cvl_hmul2_bits(v.w, f);"]
            else:
                store = [f"const float f = __uint_as_float({factor});",
                         "unsigned* const w = &v.x;", "#pragma unroll", "for (int e = 0; e < 4; ++e) {",
                         "    const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&w[e]));",
                         f"    w[e] = cvl_pack_bits({self.pack}(x.x * f, x.y * f));", "}"]
            put = f"__stcs({at}, v);" if self.stcs else f"*({at}) = v;"
            if "store" in self.ablate:
                put = "(void)v;"
            elif "sts" in self.ablate:  # a 16-byte shared store instead (the same instruction count, no global traffic)
                put = f"asm volatile(\"st.shared.v4.u32 [%0], {{%1, %2, %3, %4}};\\n\" :: \"r\"({staged if tile is not None else f'cvl_smem_addr({staged})'}), \"r\"(v.x), \"r\"(v.y), \"r\"(v.z), \"r\"(v.w) : \"memory\");"
            elif "store_l2" in self.ablate:  # every store inside the output's first 4 MB (stays in L2)
                out = self.target.split("[")[0]
                put = (f"__stcs(reinterpret_cast<uint4*>(reinterpret_cast<char*>({out}) + "
                       f"((reinterpret_cast<char*>(&{self.target}) - reinterpret_cast<char*>({out})) & 0x3FFFF0)), v);")
            load = (f"uint4 v = cvl_lds128({staged});" if tile is not None
                    else f"uint4 v = *reinterpret_cast<const uint4*>({staged});")
            if "lds" in self.ablate:  # the stores without reading the staged numerators
                load = "uint4 v = make_uint4(lane, 0u, 0u, 0u);"
            if predicated:  # the store under round > 0 and the guard, as a predicate
                ok = " && ".join(["round > 0", *([f"({self.guard})"] if self.guard else [])])
                each = [load, *store, f"cvl_stcs128_if({at}, v, {ok});"]
            else:
                each = self.guarded([load, *store, put])
            return ["#pragma unroll", f"for (int j = 0; j < {hi} - ({lo}); ++j) {{", *head, *indent(each), "}"]

        def write_parts(band: str, rnd: str, parts: int) -> list[list[str]]:
            """The scaled write of band ``band`` (round ``rnd``): in one piece, or one piece for each
            column tile (``parts == tiles``); the first waits for the statistics and fills the factor
            table."""
            out = []
            for p in range(parts):
                lines = ["{", *indent(write_head(band, rnd) if p == 0 else self.band_coords(f"({band})"))]
                if p == 0:
                    lines += indent(factors())
                lines += indent(scaled_copy(0, per_row // 2) if parts == 1 else scaled_copy(0, 4, p))
                if p + 1 == parts:
                    lines.append("    __syncwarp();  // out of the staged rows and the factors")
                out.append(lines + ["}"])
            return out

        def write_head(band: str, rnd: str) -> list[str]:  # coordinates, the statistics of band `band`
            # the row's base is the largest of its CTAs' log2-sum-exp2 and its sum that of 2^(l_q - base): a row
            # all -inf (or NaN) in every CTA gets NaN factors, as 0 / 0
            head = [*self.band_coords(f"({band})"),
                    f"cvl_mbar_wait(stats0 + (({rnd}) & 1) * 8, (({rnd}) >> 1) & 1);  // the cluster's statistics",
                    "float fin_base[2], inv_sum[2];", "#pragma unroll", "for (int r = 0; r < 2; ++r) {",
                    f"    const float* const got = cvl_part + (({rnd}) & 1) * {ctas * prow} + row0 + r * 8;",
                    f"    float top = {neg_inf};"]
            tail = ["    fin_base[r] = top;", "    inv_sum[r] = 1.0f / total;", "}"]
            if not self.quad:
                return [*head, "#pragma unroll",
                        f"    for (int q = 0; q < {ctas}; ++q) top = fmaxf(top, got[q * {prow}]);",
                        "    float total = 0.0f;", "#pragma unroll",
                        f"    for (int q = 0; q < {ctas}; ++q) {{", f"        const float w = got[q * {prow}];",
                        "        total += w == top ? 1.0f : cvl_ex2(w - top);", "    }",
                        *tail]
            # the four lanes of a row split the peers (q = lane % 4 + 4i) and merge by shuffles
            per = -(-ctas // 4)

            def mine(body: list[str]) -> list[str]:
                return ["#pragma unroll", f"    for (int i = 0; i < {per}; ++i) {{", "        const int q = lane % 4 + 4 * i;",
                        *([f"        if (q < {ctas}) {{", *indent(body, 3), "        }"] if ctas % 4 else indent(body, 2)),
                        "    }"]

            return [*head, f"    float w[{per}];",
                    *mine([f"w[i] = got[q * {prow}];", "top = fmaxf(top, w[i]);"]),
                    "    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));",
                    "    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));", "    float total = 0.0f;",
                    *mine(["total += w[i] == top ? 1.0f : cvl_ex2(w[i] - top);"]),
                    "    total += __shfl_xor_sync(0xffffffffu, total, 1);",
                    "    total += __shfl_xor_sync(0xffffffffu, total, 2);", *tail]

        def write(band: str, rnd: str) -> list[str]:  # band `band` of round `rnd`, from the staged numerators
            if self.scaled:
                return write_parts(band, rnd, 1)[0]
            lines = ["{", *indent(write_head(band, rnd))]
            for t in range(tiles):
                lines += ["    {", "        float sc[2];", "#pragma unroll",
                          f"        for (int r = 0; r < 2; ++r) sc[r] = cvl_ex2(prev_base[{t}][r] - fin_base[r]) * inv_sum[r];",
                          "#pragma unroll", "        for (int ni = 0; ni < 8; ++ni)",
                          "#pragma unroll", "        for (int h = 0; h < 2; ++h) {",
                          f"            __half* const at = pw + (lane / 4 + h * 8) * {ldp} + {t * 64} + ni * 8 + lane % 4 * 2;",
                          "            const float2 x = __half22float2(*reinterpret_cast<const __half2*>(at));",
                          f"            *reinterpret_cast<{self.pair}*>(at) = {self.pack}(x.x * sc[h], x.y * sc[h]);",
                          "        }", "    }"]
            copy = self.guarded([f"__stcs(reinterpret_cast<uint4*>(&{self.target}), "
                                 f"*reinterpret_cast<const uint4*>(pw + c / {per_row} * {ldp} + c % {per_row} * 8));"])
            return lines + ["    __syncwarp();  // the warp's output rows are staged", "#pragma unroll",
                            f"    for (int i = 0; i < {per_row // 2}; ++i) {{", "        const int c = i * 32 + lane;",
                            f"        const int m = m0 + warp_row + c / {per_row};",
                            f"        const int n = n_cta + c % {per_row} * 8;", *indent(copy, 2), "    }",
                            "    __syncwarp();  // out of the staging rows", "}"]

        spread = write_parts("band - clusters", "round - 1", tiles) if self.spread else []
        interleave = self.interleave and self.spread and self.lazy and g.fold is not None

        first = interleave and self.interleave0  # piece 0's chunks in tile 1's pass (its head after tile 0)

        def chunk(t: int) -> list[str]:
            """With ``interleave``: chunk j of the last band's piece t (t > 0) after the lazy exps of pairs
            4j to 4j + 3 of tile t (the pass every tile takes once, lazy or not); with ``first``, tile 1's
            pass also carries piece 0's chunk j after pair 4j + 1."""
            # the loop body without its guard: loads and scaling always, the store predicated (no branch,
            # so the scheduler may place the chunk among the exps); in round 0 there is no last band
            def put(piece: int, after: int) -> list[str]:
                return [f"if ((ni * 2 + h) % 4 == {after}) {{  // chunk (ni * 2 + h) / 4 of the last band's piece {piece}",
                        "    const int j = (ni * 2 + h) / 4;", *indent(self.band_coords("(band - clusters)")),
                        *scaled_copy(0, 4, piece, predicated=True)[2:-1], "}"]

            if t == 0:
                return []
            return [*(put(0, 1) if first and t == 1 else []), *put(t, 3)]

        def stage(t: int) -> list[str]:  # tile t's numerators into its columns of the warp's staged rows
            if "stage" in self.ablate:  # not staged: folded into a sink so that their work stays
                return ["#pragma unroll", f"for (int i = 0; i < {eng.regs // 2}; ++i) cvl_sink ^= cvl_pack_bits(pv[{t}][i]);"]
            return ["#pragma unroll", "for (int q = 0; q < 4; ++q)",
                    f"    cvl_stsm_x4(pw_st + {t * 128} + q * 32, cvl_pack_bits(pv[{t}][q * 4]), "
                    f"cvl_pack_bits(pv[{t}][q * 4 + 1]),",
                    f"                cvl_pack_bits(pv[{t}][q * 4 + 2]), cvl_pack_bits(pv[{t}][q * 4 + 3]));"]

        def after(t: int) -> list[str]:
            """Piece t of the last band's write (tile t's columns), then tile t's numerators staged in
            them: a tile's numerators leave the registers as soon as its statistics are done."""
            if first and t == 0:  # the statistics and the factor table now, the chunks in tile 1's pass
                lines = [*write_head("band - clusters", "round - 1"), *factors()]
                return ["if (round > 0) {", *indent(lines), "}"]
            piece = [] if interleave and t > 0 else ["if (round > 0)", *indent(spread[t])]
            staged = [*stage(0), *stage(1)] if first and t == 1 else stage(t)
            return [*piece, "__syncwarp();  // the last band's tile is out", *staged]

        lse = ["float lse[2];  // log2 of the sum of 2^x over the CTA's columns of each of the thread's rows",
               "#pragma unroll", f"for (int r = 0; r < 2; ++r) lse[r] = __fmul_rn(row_max[r], {LOG2E}) + cvl_lg2(row_sum[r]);"]
        push = [*lse, "if (lane % 4 == 0) {  // this band's statistics of the CTA's rows, to every CTA of the cluster",
                "#pragma unroll", "    for (int r = 0; r < 2; ++r)", "#pragma unroll", f"        for (int q = 0; q < {ctas}; ++q)",
                f"            cvl_cluster_push(part0 + ((round & 1) * {ctas * prow} + rank * {prow} + row0 + r * 8) * 4,",
                "                             stats0 + (round & 1) * 8, q, lse[r]);", "}"]
        if self.quad:  # lane j of a row's four pushes to peers j, j + 4 (the row's statistics are the same in all four)
            push = [*lse, "#pragma unroll", f"for (int i = 0; i < {-(-ctas // 4)}; ++i) {{",
                    "    const unsigned q = lane % 4 + 4 * i;  // this band's statistics of the CTA's rows, to CTA q",
                    *([f"    if (q < {ctas})"] if ctas % 4 else []), "#pragma unroll", "    for (int r = 0; r < 2; ++r)",
                    f"        cvl_cluster_push(part0 + ((round & 1) * {ctas * prow} + rank * {prow} + row0 + r * 8) * 4,",
                    "                         stats0 + (round & 1) * 8, q, lse[r]);", "}"]
        # the last band's output pointer for its pieces (in round 0 never stored through)
        out_prev = ["uint4* out_prev;  // the last band's row m0 + warp_row + pr, column n_cta + 8 pq",
                    "{", *indent([*self.band_coords("(band - clusters)"), "const int m = m0 + warp_row + pr;",
                                  "const int n = n_cta + pq * 8;", f"out_prev = reinterpret_cast<uint4*>(&{self.target});"]),
                    "}"] if self.out_base else []
        band_body = [
            *self.band_coords("band"), *out_prev,
            f"if (threadIdx.x == 0) cvl_mbar_expect_tx(stats0 + (round & 1) * 8, {ctas * bm * 4}u);",
            *g.band_state(neg_inf),
            *(["cvl_mbar_wait(full0 + 16 + (round & 1) * 8, (round >> 1) & 1);  // the A band is in",
               *(self.a_fragments("sa + (round & 1) * " + str(tile_a) + "u") if self.a_regs else []),
               f"const unsigned long long desc_a = desc_a0 + (unsigned long long)((round & 1) * {tile_a >> 4});"]
              if prefetch else ["cvl_mbar_wait(full0 + 16, round & 1);  // the A band is in",
                                *(self.a_fragments("sa") if self.a_regs else [])]),
            *(self.band_tiles(issue, refill, after, chunk if interleave else lambda t: []) if self.spread
              else self.band_tiles(issue, refill)),
            *self.merge_quad(),
            *([] if self.spread else ["if (round > 0)", *indent(write("band - clusters", "round - 1"))]),
            *([] if self.spread else [line for t in range(tiles) for line in stage(t)] if self.scaled else
              ["#pragma unroll", f"for (int t = 0; t < {tiles}; ++t)", "#pragma unroll", "for (int ni = 0; ni < 8; ++ni)",
               "#pragma unroll", "for (int h = 0; h < 2; ++h)",
               f"    *reinterpret_cast<__half2*>(pw + (lane / 4 + h * 8) * {ldp} + t * 64 + ni * 8 + lane % 4 * 2) = pv[t][ni * 2 + h];"]),
            "#pragma unroll", f"for (int t = 0; t < {tiles}; ++t) prev_base[t][0] = tile_base[t][0], prev_base[t][1] = tile_base[t][1];",
            *push,
            *(["if (round == 0) cvl_note(2);"] if timeline else []),
        ]
        body = [
            *(["__shared__ unsigned long long cvl_tl[16];  // ablation: the timeline",
               "#define cvl_note(i) do { if (threadIdx.x == 0) asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(cvl_tl[i]) :: \"memory\"); } while (0)",
               "cvl_note(0);"] if timeline else []),
            *self.common_head("a ring of 2 B tiles of 64 rows", 2 if prefetch else 1),
            f"__half* const pw = reinterpret_cast<__half*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem)) + {a_bytes + 2 * tile_b})"
            f" + (threadIdx.x / 32) * {16 * ldp};  // this warp's 16 rows of numerators, then of output",
            "const int lane = threadIdx.x % 32;", "const int wg = 0;", "const int wl = threadIdx.x / 32;",
            "const int warp_row = wl * 16;  // the warp's first row in the band",
            "const int row0 = warp_row + lane / 4;  // the thread's first row",
            *([f"const unsigned pw_st = cvl_smem_addr(pw) + {self.stsm_lane(ldp)};  // this lane's stmatrix row",
               f"__shared__ unsigned cvl_factor[4][{16 * fs}];  // each warp's factors: [row][tile] (f16x2 or f32 bits)",
               "unsigned* const sf = cvl_factor[wl];"] if self.scaled else []),
            *(["const int pr = lane / 8, pq = lane % 8;  // a write piece's rows 4j + pr, 16-byte chunk pq of a tile",
               f"const unsigned pw_rd = cvl_smem_addr(pw) + (pr * {ldp} + pq * 8) * 2;  // shared-window addresses",
               f"const unsigned sf_rd = cvl_smem_addr(sf) + pr * {4 * fs};"]
              if self.spread else []),
            f"const unsigned long long desc_a{'0' if prefetch else ''} = cvl_wgmma_desc(sa, 16u, 1024u);",
            "const unsigned long long desc_b = cvl_wgmma_desc(sb, 16u, 1024u);",
            f"float acc_even[{eng.regs}], acc_odd[{eng.regs}];  // even and odd column tiles",
            *([f"unsigned afr[{self.ks}][4];  // the A band's mma fragments of the warp's rows, a k step each"]
              if self.a_regs else []),
            f"__half2 pv[{tiles}][{eng.regs // 2}];  // the numerators of each tile, rounded to f16",
            f"float tile_base[{tiles}][2], prev_base[{tiles}][2];  // the thread's bases after each tile (this band, the last)",
            f"__shared__ __align__(8) unsigned long long cvl_full[{bars}];  // the 2 B slots, then A" + (" (2 buffers)" if prefetch else ""),
            "__shared__ __align__(8) unsigned long long cvl_stats[2];  // statistics received, by round parity",
            f"__shared__ float cvl_part[{2 * ctas * prow}];  // [round parity][sender rank][row]: log2 of the row's sum of 2^x",
            "const unsigned full0 = cvl_smem_addr(cvl_full);", "const unsigned stats0 = cvl_smem_addr(cvl_stats);",
            "const unsigned part0 = cvl_smem_addr(cvl_part);",
            f"const unsigned rank = blockIdx.x % {ctas};",
            f"const int n_cta = rank * {tiles * 64};  // the cluster rank's columns",
            f"const int clusters = gridDim.x / {ctas};",
            "if (threadIdx.x == 0) {",
            f"    for (int s = 0; s < {bars}; ++s) cvl_mbar_init(full0 + s * 8, 1);",
            "    cvl_mbar_init(stats0, 1);", "    cvl_mbar_init(stats0 + 8, 1);",
            "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");",
            *indent(load(f"blockIdx.x / {ctas}", list(range(min(2, tiles))), "0")),
            *([f"    if (blockIdx.x / {ctas} + clusters < {self.bands})",
               *indent(load(f"blockIdx.x / {ctas} + clusters", [], "1"), 2)] if prefetch else []),
            *(["    cvl_note(8);"] if timeline else []),
            "}",
            "__syncthreads();",
            *(["cvl_note(9);"] if timeline else []),
            "cvl_cluster_arrive();", "cvl_cluster_wait();  // every CTA's mbarriers are set up before any push",
            *(["cvl_note(1);"] if timeline else []),
            *(["unsigned cvl_sink = 0u;  // ablation: the unstaged numerators' bits"] if "stage" in self.ablate else []),
            "int round = 0;", "int band = blockIdx.x / " + str(ctas) + ";",
            "#pragma unroll 1",
            f"for (; band < {self.bands}; band += clusters, ++round) {{", *indent(band_body), "}",
            *(["cvl_note(3);"] if timeline else []),
            *write("band - clusters", "round - 1"),
            *(["cvl_note(4);"] if timeline else []),
            # no cluster barrier before leaving (EXIT_SYNC): the last write waited for the last band's statistics,
            # so every push into this CTA has landed, and no CTA pushes after its loop
            *(["cvl_cluster_arrive();", "cvl_cluster_wait();  // no CTA leaves while a push to it may be in flight"]
              if self.exit_sync else []),
            *(["cvl_note(5);", "if (threadIdx.x == 0) {",
               "    unsigned sm;", "    asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));",
               "    cvl_tl[6] = sm;", "    cvl_tl[7] = round;",
               f"    for (int i = 0; i < 16; ++i) reinterpret_cast<unsigned long long*>({self.target.split('[')[0]})[blockIdx.x * 16 + i] = cvl_tl[i];",
               "}"] if timeline else []),
            *(["if (cvl_sink == 0x7fc00001u && threadIdx.x == 1000) __trap();  // keeps the sink"]
              if "stage" in self.ablate else []),
        ]
        if "empty" in self.ablate:  # the launch alone: the same signature, grid, clusters and shared memory
            body = []
        return self.emitted(entry, body, a_bytes + 2 * tile_b + 4 * 16 * ldp * 2 + 1024,
                            PUSH_HELPER + (STORE_IF_HELPER if interleave else "") + (self.rs_helpers() if self.a_regs else ""),
                            persistent=True)
