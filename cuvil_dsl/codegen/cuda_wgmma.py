"""Hopper GEMM main loop: ``wgmma.mma_async`` (sm_90a) behind :class:`MmaEngine`'s interface.

One block computes a BM x BN tile with BM / 64 *consumer warpgroups* (128 threads each, every
one of them also a loader); warpgroup ``wg`` owns rows ``wg * 64 ..`` and all BN columns, so one
``wgmma.mma_async.m64n{BN}k16`` per 16-deep slice of K covers its whole share.

**Operands** go global -> shared by 16-byte ``cp.async`` (zero-filled past M, N or K: the
contiguous extent of each operand must be a multiple of 8 elements so a chunk is all in or
all out) into the 128-byte-swizzled layout that wgmma's shared-memory matrix descriptors read.
Everything below is in bytes, with the stage bases 1024-byte aligned (the swizzle is a function
of address bits, so atoms must start at a multiple of 8 x 128 bytes):

* K-major operand (K contiguous; ``a`` here, or ``b`` stored N x K): BK = 64, so one tile row
  (64 halves) is exactly one 128-byte swizzle row. Element (mn, k) lives at
  ``mn * 128 + ((k / 8) ^ (mn % 8)) * 16 + (k % 8) * 2``. Descriptor: SBO = 1024 (from one
  group of 8 rows to the next), LBO unused for swizzled K-major layouts (encoded as 1); the
  16-deep slice ``kk`` starts ``kk * 32`` bytes further (the hardware applies the XOR to the
  final address, which is why the tile base must be 1024-aligned).
* MN-major operand (M or N contiguous; ``b`` of the benchmark, K x N row-major): atoms of 64
  MN-elements (128 bytes) x 8 K-rows. Element (mn, k) lives at
  ``(mn / 64) * (BK * 128) + k * 128 + (((mn % 64) / 8) ^ (k % 8)) * 16 + (mn % 8) * 2``.
  Descriptor: LBO = BK * 128 (from one 64-wide MN atom to the next), SBO = 1024 (from one
  group of 8 K-rows to the next); slice ``kk`` starts ``kk * 16 * 128`` bytes further. The
  instruction's transpose immediate (``imm-trans-b`` / ``imm-trans-a``) is 1 for it.

Descriptor bits (PTX ISA, "matrix descriptor" of the asynchronous warpgroup MMA): 0-13 start
address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset (0: atoms are 1024-aligned),
62-63 swizzle (1 = 128-byte).

**Pipeline** (``stages`` S, ``pending`` W = wgmma groups left in flight across a step): P =
S - 1 - W tiles are loaded ahead. Step ``s``: wait for tile ``s``'s copies, ``fence.proxy.async``
(cp.async writes are generic-proxy, wgmma reads async-proxy), ``__syncthreads``, issue the copies
of tile ``s + P`` into the stage that tile ``s - 1 - W`` used (every warpgroup has retired that
one's wgmma before the barrier), then ``wgmma.fence``, 4 wgmma, ``commit_group``,
``wait_group W``.

**Accumulators**: ``acc[BN / 2]`` f32 per thread in wgmma's D fragment layout: register
``ni * 4 + h * 2 + q`` holds row ``wg * 64 + warp % 4 * 16 + lane / 4 + h * 8``, column
``ni * 8 + lane % 4 * 2 + q`` (the m16n8 layout of ``mma.sync``, repeated over the N/8
column groups, one 16-row band per warp). :meth:`WgmmaEngine.elements` walks them with the
same ``m``, ``n``, ``ACC``, ``slot`` names as :class:`~cuvil_dsl.codegen.cuda_gemm.MmaEngine`.

Restrictions: f16/bf16 only; BK = 64; BM in (64, 128, 192, 256) (one warpgroup per 64 rows);
BN a multiple of 64 up to 256; operand rows 16-byte aligned (contiguous extent % 8 == 0).
Other edges (M, N, K not multiples of the tile) are zero-filled / guarded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from cuvil_dsl.types import DType

StepExpr = Callable[[str], str]

_SWIZZLE_128B = 1

# Render plain GEMMs (``@`` + epilogue, batched too) with this engine on sm_90/sm_90a when
# :func:`plain_engine` allows; False keeps them on ``mma.sync`` (benchmarks/ab_wgmma.py compares).
WGMMA = True
WGMMA_ARCHS = ("sm_90", "sm_90a")  # targets whose GEMMs may be built for sm_90a
ARCH = "sm_90a"  # what such a kernel is compiled for (wgmma is an arch-specific feature)
# The library's plain-GEMM choices (``_GemmKernel.render_plain``), switchable for A/B runs
# (benchmarks/ab_wgmma.py --library sets them per build):
#   PAIRED_STORES: a 16-bit output contiguous along N (every output, N even) is written as one
#       __half2 / __nv_bfloat162 store per pair of adjacent accumulator columns (n, n + 1), n even,
#       and 16-bit operands contiguous along N are read as pairs; each element's arithmetic is the
#       per-element epilogue's (same rounding); the edge tests ``m < M`` / ``n < N`` are emitted only
#       where the tiles do not divide M / N. False: one 2-byte store per element, both tests always
#       (with LARGE_TILE (128, 256, 4, 1): the kernel rendered before these switches).
#   LARGE_TILE: (BM, BN, stages, pending) for launches of at least two blocks per SM. (128, 256, 4, 1):
#       2 consumer warpgroups, 256 threads. Through the library with paired stores, gelu(A @ B + bias)
#       f16 4096^3 on the H200 took 217.7 us with (128, 256, 4, 1) against 229.2 us with (256, 128,
#       4, 1) (4 consumer warpgroups, 512 threads) and 231.9 us warp-specialised (2026-11-29,
#       benchmarks/ab_wgmma.py); with per-element stores 256 x 128 had been the faster one.
#   LIBRARY_WS: GEMMs on LARGE_TILE run the warp-specialised persistent kernel of TUNING "ws" (a
#       producer warpgroup loading through mbarriers, BM / 64 consumer warpgroups, setmaxnreg; grid
#       min(tiles, SMs)): True always, "tma" where the operands load by TMA (one producer thread
#       issues each stage's tensor copies), False (the default) never. gelu(A @ B + bias) f16
#       4096^3 on the H200 (2026-11-30, session 6, benchmarks/ab_wgmma.py --rounds 4, round-robin):
#       warp-specialised with TMA 238.3 / 256.1 / 238.8 / 246.7 us against 233.8 / 251.0 / 239.6 /
#       243.3 for the plain TMA kernel (no gain: the consumers' epilogue still stalls the tensor
#       cores; `cuvil-dsl bench` 205.1 against 204.7 a session earlier) and 258.8-273.3 with the
#       producer's cp.async copies (the previous warp-specialised kernel).
#   TMA: the library's kernels (plain and warp-specialised) load their tiles with the Tensor Memory
#       Accelerator (``cp.async.bulk.tensor`` from one thread, completion on a per-stage mbarrier)
#       instead of 16-byte cp.async from every thread, when neither operand has batch axes (see
#       :meth:`WgmmaEngine.use_tma`).
#   MULTICAST: TMA kernels on LARGE_TILE run their CTAs in clusters of 2 along M (tiles mt, mt + 1 of one
#       column tile, when the row tiles pair up): each loads its own A tile and half of the shared B
#       tile, multicast into both CTAs, so every B byte leaves L2 once for two CTAs (see :func:`pairs`):
#       True for both kernels, "plain" or "ws" (the warp-specialised one) for one, False never. Probe
#       (2026-11-30, session 8, benchmarks/ab_wgmma.py, gelu(A @ B + bias) f16 4096^3 on the H200):
#       loading half of B alone (wrong results, a pair's L2 traffic without the handshake) ran
#       204.8-220.3 us against 229.2-242.1 for the default in the same rounds. Built, correct (GPU
#       tests, both kernels, both B layouts), but not faster: 8 rounds each, the plain kernel in pairs
#       (its refill waits for the partner's copy of the stage after the step's wgmma are issued)
#       231.7-237.2 us against 231.1-239.9 unpaired; the warp-specialised one in pairs 233.9-239.1
#       against 205.0-234.8 unpaired (bimodal between rounds, as this GEMM often is). So L2 traffic is
#       not what holds the GEMM back; the probe's gain is likely its half-constant B operand (less
#       switching power under the H200's power cap), not its traffic. Off by default (False).
PAIRED_STORES = True
# Session 12: a plain kernel's 16-bit output through shared memory. Paired 4-byte stores write 8 rows of
# 16 bytes a warp instruction: 8 transactions of the L1 data path (and half-filled 32-byte sectors) for
# every 128 bytes, in an epilogue that the tensor cores idle through. Staged (each pair a conflict-free
# 4-byte shared store, then each warpgroup's 64 rows copied out as 16-byte loads and stores, a row's 512
# bytes a warp instruction) it is 3 transactions for 128 bytes, in whole sectors.
STAGED_STORES = True
LARGE_TILE = (128, 256, 4, 1)
# LARGE_TILE when its launch (tiles x parts of K) fills at least LARGE_WAVES x SMs; below, 128 x 128 tiles.
# It was 2 (waves) before session 14; measured on the H200 (benchmarks/ab_wgmma.py, 4 interleaved rounds,
# `2026-11-30-h200-ab_wgmma-session14-split-2.md`): 1536 x 2048 x 8192 (96 large tiles) 94.0 us against 116.2,
# 2048 x 2048 x 8192 (128) 105.9 against 134.4, and in the call before 2048 x 4096 x 4096 115.0-117.2 against
# 134.4-135.7 for 128 x 128 tiles two a multiprocessor.
LARGE_WAVES = 0.5
# Session 19: the narrower large tile. A launch of LARGE_TILE takes ceil(tiles / SMs) waves, and a thin last wave
# costs nearly a full one (each CTA's time does not shrink with the SMs left idle): 3072^3 is 288 tiles of 128 x 256,
# 2.18 waves, so three waves' time. NARROW_TILE (128 x 192: 384 tiles, 2.91 waves) takes the launch when its waves,
# each NARROW_COST of a LARGE_TILE wave, come to at most NARROW_MARGIN of LARGE_TILE's (:func:`narrow_pays`); only
# with TMA loads (the cp.async loader needs a tile row's 16-byte chunks to divide the block) and where LARGE_TILE
# would not split K. Measured (`benchmarks/ab_wgmma.py --library-modes 128x192 --rounds 4`,
# `2026-12-01-h200-ab_wgmma-session19-narrow.md`; gelu(A @ B + bias) f16, medians of 4 rounds, LARGE_TILE against
# 128 x 192 s4p1): 3072^3 126.6 us against 102.4 (torch matmul + bias + gelu 122.1, cuBLAS alone 87.6);
# 1536 x 4096 x 4096 107.6 against 91.4; 2560 x 4096 x 4096 (3 waves against 4) 165.7 against 174.2; 4096^3 (4
# against 6) 227.1 against 271.7. A full wave of 128 x 192 tiles took about 0.81 of one of 128 x 256 (0.75 of the
# flops): NARROW_COST. With the rule (`-session19-narrow-2.md`, 4 rounds, 128 x 256 always against the rule):
# 3072^3 125.8 against 104.4, 1536 x 4096 x 4096 104.8 against 95.0, 1536 x 2048 x 8192 (one wave: 96 tiles or 132)
# 97.1 against 85.9; `cuvil-dsl bench` at 3072^3 (`2026-12-01-h200-bench-gemm-thin-wave-session19.md`) 116.2 us
# (0.82x PyTorch) against 95.7 (1.00x; torch.compile 100.6, Triton 126.1). None: LARGE_TILE always. (Stream-K, equal
# shares of the k steps on one CTA a multiprocessor, was built and measured 10-30% slower than this rule at every size
# tried: every CTA's split tiles meet through the L2 at once; benchmarks/NOTES.md, commit 2efcbc3.)
NARROW_TILE: tuple[int, int, int, int] | None = (128, 192, 4, 1)
NARROW_COST = 0.81
NARROW_MARGIN = 0.9
# Split-K (session 14): a GEMM whose tiles fill at most half the SMs splits K into S parts, one CTA each
# (tiles x S <= SMs, every part at least SPLIT_MIN_STEPS k steps of 64, S <= SPLIT_MAX, or LARGE_SPLIT_MAX on
# LARGE_TILE, whose partials are twice the size). Each CTA writes its f32 partial tile to the kernel's
# workspace and takes a ticket from the tile's counter; the CTA that takes the last one adds the S partials
# in the order s = 0 .. S - 1 (so the bits do not depend on which CTA comes last), runs the epilogue and puts
# the counter back to 0 for the next launch. Large tiles when their split fills half the SMs (LARGE_WAVES),
# else 128 x 128. Measured (same file): 1024 x 1024 x 8192 41.8 us on 32 large tiles in 4 parts, 45.3 on 64
# of 128 x 128 in 2, 63.9 unsplit; 512 x 1024 x 8192 30.6 on 32 of 128 x 128 in 4, 37.0 on 16 large ones in
# 8 (the last CTA of a tile reads 1 MB of partials), 60.5 unsplit; 1024 x 2048 x 8192 63.1 on 64 large tiles
# in 2, 68.8 unsplit. (128 x 128 tiles two CTAs a multiprocessor, split in up to 4: 43.2, 35.8 and 72.8 us;
# removed.)
SPLIT_K = True
SPLIT_MIN_STEPS = 16
SPLIT_MAX = 8
LARGE_SPLIT_MAX = 4
# Two parts of a tile as one cluster, meeting in distributed shared memory (cuda_matmul._GemmKernel.
# split_cluster_epilogue) instead of through the kernel's workspace. Measured (`-split-cluster.md`, 4 rounds):
# 1024 x 2048 x 8192 (2 parts) 59.9 us against 63.5 through the workspace; with 4 parts a cluster the grid
# took two waves (1024 x 1024 x 8192 68.1 against 41.8, 512 x 1024 x 8192 44.5 against 30.5), so only pairs.
SPLIT_CLUSTER = True
# Session 15: more than two parts (an even number) as clusters of two, each summing its pair in distributed shared
# memory, the CTA of rank r then holding the pair's sum of half r of the tile's columns; the halves of the
# clusters meet through the workspace, the last to arrive adding them (cuda_matmul._GemmKernel.
# split_cluster_epilogue). The last CTA of a tile in 4 parts read 3 x 128 KB of partials alone; now it reads
# 64 KB, and half the tile's epilogue runs on each of two CTAs.
SPLIT_CLUSTER_GROUPS = True
# Session 18: where a cluster's parts meet. "dsmem" (sessions 14-17): each CTA writes its whole partial into its own
# shared memory and, after a cluster barrier, reads its slice of the columns from every CTA through the cluster's
# window. The timeline (`2026-12-01-h200-ab_wgmma-session17-timeline.md`) put that read at 4.6 us for 64 KB from
# the peer (about 14 GB/s a multiprocessor). "l2": each CTA writes the slices its peers own to the kernel's
# workspace straight from its accumulators (a warp's 512 contiguous bytes a store), a cluster barrier (the cluster
# keeps the CTAs resident together), then adds its peers' parts of its own slice, read back in the same layout,
# into its accumulators; the sums, in rank order, are bit for bit the "dsmem" ones. Measured (`ab_wgmma.py
# --library-modes "timeline,before session 18" --rounds 5`, `2026-12-01-h200-ab_wgmma-session18-split-l2.md`), medians
# of 5 rotated rounds, "l2" against "dsmem": 1024 x 1024 x 8192 39.2 us against 40.2; 1024 x 2048 x 8192 58.3 against
# 59.6; 512 x 1024 x 8192 29.7 against 30.8; 256 x 512 x 8192 19.6 against 21.0. Less than the 3 us predicted: all
# 128 CTAs meet at once, so the exchange runs at the L2's shared rate (64 KB a CTA written in about 2.4 us).
SPLIT_EXCHANGE = "l2"


def split_cluster(parts: int) -> int:
    """CTAs a cluster of a kernel split along K in ``parts`` (whose output can be stored in 16-byte chunks), or 0
    for the workspace alone: pairs (:data:`SPLIT_CLUSTER`), of an even number of parts, more than two only with
    :data:`SPLIT_CLUSTER_GROUPS`."""
    if not SPLIT_CLUSTER or parts < 2 or parts % 2 or (parts > 2 and not SPLIT_CLUSTER_GROUPS):
        return 0
    return 2


# The walk order of a plain kernel's tiles (session 15): 0 row-major (column tiles fastest); G > 1 groups of G
# row tiles (all of them when there are fewer), each walked column by column, when the tiles take more than one
# wave. A wave in row-major order covers few row tiles and every column tile: at 8192^3 each wave of 132 CTAs
# streams all of B (128 MB, more than the L2 holds) from DRAM; in groups of 16 a wave needs 16 A panels and about
# 8 B panels (a panel of B is twice one of A for 128 x 256 tiles, so 16 is about the square root of 132 x 2,
# which minimises a wave's panels). Measured (benchmarks/ab_wgmma.py, 3 interleaved rounds,
# `2026-11-30-h200-ab_wgmma-session15-raster.md`), medians of the rounds, row-major against groups of 4 / 8 / 16:
# 8192^3 1833.8 us against 1792.8 / 1738.2 / 1717.2; 4096^3 239.3 against 233.0 / 226.0 / 228.7; 4096 x 8192 x
# 4096 485.7 against 479.8 / 464.9 / 456.2 (cuBLAS alone 1711.6, 214.1, 418.6); groups of 16 faster than row-major
# in every round. With 16 row tiles or fewer the walk is column-major (`-session15-raster-2.md`): 2048 x 8192 x 4096
# 244.2 row-major against 232.6 (groups of 8: 238.2); 2048 x 4096 x 4096 121.3 against 115.8; 1024 x 16384 x 4096
# 273.8 against 236.8. Again with the kernels' order rotated round by round (`-session15-ws-rotated.md`, 6 rounds):
# 4096^3 238.5 against 229.3, 8192^3 1937.2 against 1747.1, 2048 x 4096 x 4096 119.9 against 114.7. These GEMMs run
# at the power cap: fewer bytes from DRAM leave more of it to the tensor cores (in `cuvil-dsl bench`'s shorter
# bursts, less deep into the cap, 1-2% at 4096^3).
RASTER_ROWS = 16
LIBRARY_WS: bool | str = False
# Session 23: the warp-specialised kernel's mbarrier wait traps through a __noinline__ function
# (WS_HELPERS_OUTLINED_TRAP), as the attention kernel's does since session 22: inlined, ptxas kept every
# thread at the launch bounds' entry count (R159 here) whatever setmaxnreg gave the consumers (R193 outlined).
WS_TRAP_OUTLINED = True
TMA = True
# Session 19: batched operands load by TMA too, through three-dimensional maps whose outer dimension is the batch
# (:func:`batch_view`); before, any operand with batch axes kept the cp.async loader.
TMA_BATCHED = True
MULTICAST: bool | str = False
# Session 36 (an A/B switch, not yet measured): the TMA main loop refills the stage of step s + P right after the block
# barrier, before waiting for step s's tile; by default it waits first, so a late tile also delays the next refill and
# the loads lose the lead the stages give them (benchmarks/NOTES.md, gemm_gelu_f16, session 36).
REFILL_FIRST = False
# spec `kernels:` keys that keep a GEMM on the mma.sync template (whose tiles they describe)
_OVERRIDES = frozenset(("tile", "block", "launch_bounds", "max_registers"))


@dataclass(frozen=True)
class WgmmaOperand:
    """The fields of :class:`cuvil_dsl.codegen.cuda_gemm.Operand` this engine reads (either works)."""

    role: str  # "a" (extent M) or "b" (extent N)
    pointer: str  # C expression of the base pointer
    dtype: DType
    extent: int  # M or N
    depth: int  # K
    k_major: bool  # K is the contiguous axis
    stride_mn: int  # elements
    stride_k: int  # elements


def supported(a, b, bm: int, bn: int, bk: int = 64) -> str | None:
    """``None`` when the engine can run this GEMM, else why not (the planner's test)."""
    if a.dtype not in (DType.F16, DType.BF16) or b.dtype != a.dtype:
        return "wgmma engine: f16/bf16 only"
    if bk != 64:
        return "wgmma engine: BK must be 64 (one 128-byte swizzle row of halves)"
    if bm % 64 or not 64 <= bm <= 256:
        return "wgmma engine: BM must be 64, 128, 192 or 256"
    if bn % 64 or not 64 <= bn <= 256:
        return "wgmma engine: BN must be a multiple of 64 up to 256"
    for o in (a, b):
        contiguous = o.depth if o.k_major else o.extent
        unit = o.stride_k if o.k_major else o.stride_mn
        other = o.stride_mn if o.k_major else o.stride_k
        if unit != 1 or contiguous % 8 or other % 8:
            return f"wgmma engine: operand {o.role} rows are not 16-byte aligned"
    return None


def batch_view(o, domain: Sequence[int] | None) -> tuple[int, int, tuple[tuple[int, int], ...]] | None:
    """Operand ``o``'s batch axes (``cuda_gemm.Operand.batch``: domain axis and element stride of each axis it does
    not broadcast) as one more dimension of a TMA map: (count, element stride, ((axis, weight), ...)), the batch
    coordinate being the sum of ``c{axis} * weight``; (1, 0, ()) without batch axes; None where they do not fold
    into one dimension of one stride (each axis's stride the next one's times its extent in ``domain``) or
    :data:`TMA_BATCHED` is off."""
    axes = sorted(getattr(o, "batch", ()))
    if not axes:
        return 1, 0, ()
    if not TMA_BATCHED or domain is None:
        return None
    unit, weight, terms = axes[-1][1], 1, []
    for d, stride in reversed(axes):  # innermost first
        if stride != unit * weight:
            return None
        terms.append((d, weight))
        weight *= domain[d]
    return weight, unit, tuple(reversed(terms))


def tma_loads(a, b, domain: Sequence[int] | None = None) -> bool:
    """Whether the library's kernel for operands ``a``, ``b`` (``cuda_gemm.Operand``) loads them by TMA
    (:data:`TMA`): operands without batch axes, or with batch axes that fold into one dimension of a
    three-dimensional map (:func:`batch_view`, over the kernel's ``domain``)."""
    return TMA and batch_view(a, domain) is not None and batch_view(b, domain) is not None


def pairs(eng: "WgmmaEngine", m_tiles: int) -> bool:
    """Whether the kernel of ``eng`` (TMA loads to come) runs its CTAs in pairs sharing B: :data:`MULTICAST`
    names its kind (True both, "plain", "ws" the warp-specialised one), the large tile, an even number of
    row tiles (every CTA has its partner) and B tiles that split in two (two 64-column boxes each of an
    MN-major B; half the rows of a K-major one)."""
    kernels = {True: (False, True), "plain": (False,), "ws": (True,)}.get(MULTICAST, ())
    return (eng.specialised in kernels and (eng.bm, eng.bn, eng.stages, eng.pending) == tuple(LARGE_TILE)
            and eng.split == 1 and m_tiles % 2 == 0 and (eng.b.k_major or eng.bn // 64 % 2 == 0)
            and not getattr(eng.a, "batch", ()) and not getattr(eng.b, "batch", ()))


def plain_engine(k, a, b, blocks: Callable[[int, int], int]) -> "WgmmaEngine | None":
    """The wgmma engine for a plain GEMM of :class:`~cuvil_dsl.codegen.cuda.CudaKernel` ``k``, or
    None (then ``mma.sync`` or SIMT runs it). ``blocks(bm, bn)``: blocks a launch with that tile takes.

    Rule: target sm_90 or sm_90a, f16/bf16 operands whose rows (and batch strides) keep 16-byte
    alignment (:func:`supported`), and no spec override of the tile, block, launch bounds or
    registers (those describe the mma.sync template and are checked against it). Tile:
    :data:`LARGE_TILE` (128 x 256, 4 stages, one wgmma group in flight) when its launch, split along K
    if its tiles leave half the SMs idle (:func:`split_parts`, at most :data:`LARGE_SPLIT_MAX` parts),
    fills at least :data:`LARGE_WAVES` of the SMs (warp-specialised when :data:`LIBRARY_WS` and not
    split), or :data:`NARROW_TILE` (128 x 192) in its place when the large tiles end in a thin last wave
    (:func:`narrow_pays`; unsplit, TMA loads only); else 128 x 128, with 3 stages and none in flight
    (99 KiB: two blocks resident per SM) when there is more than one wave (reached only with LARGE_WAVES
    above 0.5, as before session 14: 128 x 128 tiles number at most twice the large ones), or 4 stages
    and one in flight when one wave covers the launch, split along K when its tiles leave half the SMs
    idle (H200, gelu(A @ B + bias) f16: 4096^3 253 us for 128x256 vs 274/307 us for 128x128 s3/s4 and
    581 us for mma.sync; 1024 x 2048 x 512 16.3 us for 128x128 s4 vs 25.1 us for 128x256; standalone,
    2026-11-29: 4096^3 251.9 us for 256x128 vs 277.7 us for 128x256; session 14's measurements at
    :data:`LARGE_WAVES` and :data:`SPLIT_K`; session 19's at :data:`NARROW_TILE`)."""
    if not WGMMA or k.arch not in WGMMA_ARCHS or _OVERRIDES & set(k.config.overridden):
        return None
    if any(stride % 8 for o in (a, b) for _axis, stride in getattr(o, "batch", ())):
        return None  # a batch's operand would not start 16-byte aligned
    steps, large = -(-a.depth // 64), blocks(LARGE_TILE[0], LARGE_TILE[1])
    tma = tma_loads(a, b, k.p.domain)
    ws = LIBRARY_WS is True or (LIBRARY_WS == "tma" and tma)
    large_parts = split_parts(large, steps, k.sm_count, LARGE_SPLIT_MAX)
    if large * large_parts >= LARGE_WAVES * k.sm_count and supported(a, b, *LARGE_TILE[:2]) is None:
        (bm, bn, stages, pending), parts = LARGE_TILE, large_parts
        if (parts == 1 and NARROW_TILE is not None and tma and not ws and supported(a, b, *NARROW_TILE[:2]) is None
                and narrow_pays(large, blocks(*NARROW_TILE[:2]), k.sm_count)):
            bm, bn, stages, pending = NARROW_TILE
    elif blocks(128, 128) > k.sm_count:
        (bm, bn, stages, pending), parts = (128, 128, 3, 0), 1
    else:  # one wave of 128 x 128 tiles, split along K when they leave half the SMs idle
        (bm, bn, stages, pending), parts = (128, 128, 4, 1), split_parts(blocks(128, 128), steps, k.sm_count)
    if supported(a, b, bm, bn) is not None:
        return None
    eng = WgmmaEngine(a, b, bm=bm, bn=bn, stages=stages, pending=pending, index_t=k.index_t)
    eng.specialised = ws and (bm, bn, stages, pending) == tuple(LARGE_TILE) and parts == 1
    eng.split = parts
    return eng


def narrow_pays(wide: int, narrow: int, slots: int) -> bool:
    """Whether :data:`NARROW_TILE`'s launch of ``narrow`` CTAs should replace :data:`LARGE_TILE`'s of ``wide``, one
    CTA a multiprocessor on ``slots`` of them: its waves, each :data:`NARROW_COST` of a wide one, at most
    :data:`NARROW_MARGIN` of the wide launch's waves (3072^3: 3 x 0.81 against 3; 4096^3: 6 x 0.81 against 4)."""
    return NARROW_TILE is not None and -(-narrow // slots) * NARROW_COST <= NARROW_MARGIN * -(-wide // slots)


def raster_rows(m_tiles: int, n_tiles: int, slots: int) -> int:
    """Row tiles a group of the walk order holds (:data:`RASTER_ROWS`, at most ``m_tiles``: then the walk is
    column-major), or 0 for row-major: groups only when the tiles take more than ``slots`` CTAs (one wave walks
    any order) and there are at least two row and two column tiles."""
    g = min(RASTER_ROWS, m_tiles)
    return g if g > 1 and n_tiles > 1 and m_tiles * n_tiles > slots else 0


def split_parts(tiles: int, steps: int, slots: int, most: int | None = None) -> int:
    """Parts of K for a one-wave GEMM of ``tiles`` output tiles and ``steps`` k steps (:data:`SPLIT_K`),
    with ``slots`` CTAs resident at once (SMs x CTAs a multiprocessor): as many as fit the slots beside
    the tiles, each of at least :data:`SPLIT_MIN_STEPS` steps, at most :data:`SPLIT_MAX`; 1 (no split)
    unless the tiles leave half the slots idle. Parts walk ``ceil(steps / S)`` steps each (the last
    fewer, its steps past K loading zeros), and no part is empty. ``most``: a lower cap than SPLIT_MAX."""
    if not SPLIT_K or 2 * tiles > slots:
        return 1
    parts = min(slots // tiles, steps // SPLIT_MIN_STEPS, SPLIT_MAX if most is None else most)
    if parts < 2:
        return 1
    per = -(-steps // parts)
    return -(-steps // per)


HELPERS = r"""
__device__ __forceinline__ unsigned cvl_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared (a shared-window address), bypassing L1; zero-filled when !valid.
__device__ __forceinline__ void cvl_cp_async16s(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cvl_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cvl_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
// cp.async wrote through the generic proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void cvl_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void cvl_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cvl_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cvl_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// Matrix descriptor: start >> 4 (bits 0-13), LBO >> 4 (16-29), SBO >> 4 (32-45), swizzle (62-63).
__device__ __forceinline__ unsigned long long cvl_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4)
         | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16)
         | ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32)
         | ((unsigned long long)SWIZZLE << 62);
}
""".replace("SWIZZLE", str(_SWIZZLE_128B))


TMA_HELPERS = r"""
// CUtensorMap (cuda.h): 128 opaque bytes, passed by value as a __grid_constant__ parameter
struct __align__(64) cvl_tensor_map { unsigned long long opaque[16]; };
__device__ __forceinline__ void cvl_mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}
// box (c0, c1) of the tensor map (c0 innermost, in elements; out of bounds reads as zero) -> shared
// memory at dst, in the map's 128-byte swizzle; its bytes complete a transaction on bar
__device__ __forceinline__ void cvl_tma_2d(unsigned dst, const cvl_tensor_map& map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void cvl_tma_prefetch(const cvl_tensor_map& map) {
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<unsigned long long>(&map)) : "memory");
}
"""

TMA3_HELPERS = r"""
// box (c0, c1, c2) of a three-dimensional tensor map (c2: the batch) -> shared memory at dst, as cvl_tma_2d
__device__ __forceinline__ void cvl_tma_3d(unsigned dst, const cvl_tensor_map& map, int c0, int c1, int c2,
                                           unsigned bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}
"""

PAIR_HELPERS = r"""
// CTAs in clusters of 2 sharing B: cvl_tma_2d into the same shared address of every CTA in mask,
// completing on the same barrier address in each
__device__ __forceinline__ void cvl_tma_2d_mc(unsigned dst, const cvl_tensor_map& map, int c0, int c1, unsigned bar,
                                              unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}
// one arrival on the barrier at the same address in CTA `rank` of the cluster
__device__ __forceinline__ void cvl_mbar_arrive_cta(unsigned bar, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(remote) : "memory");
}
__device__ __forceinline__ void cvl_pair_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
"""


class WgmmaEngine:
    """wgmma tiles; warpgroup ``wg`` owns rows ``wg * 64 ..`` of the BM x BN tile."""

    def __init__(self, a, b, *, bm: int = 128, bn: int = 256, bk: int = 64, stages: int = 4, pending: int = 1,
                 index_t: str = "long long", swap_mn_offsets: bool = False):
        why = supported(a, b, bm, bn, bk)
        if why:
            raise ValueError(why)
        if not 0 <= pending < stages - 1:
            raise ValueError("need 0 <= pending < stages - 1")
        self.a, self.b = a, b
        self.bm, self.bn, self.bk = bm, bn, bk
        self.stages, self.pending = stages, pending
        self.ahead = stages - 1 - pending  # tiles loaded ahead of the one being multiplied
        self.index_t = index_t
        self.swap_mn_offsets = swap_mn_offsets  # debugging aid: LBO and SBO exchanged for MN-major operands
        self.dtype = a.dtype
        self.item = 2
        self.storage = "__half" if a.dtype is DType.F16 else "__nv_bfloat16"
        self.groups = bm // 64  # consumer warpgroups
        self.threads = 128 * self.groups
        self.regs = bn // 2  # f32 accumulators per thread
        self.slots = 2  # row slots per thread (h)
        self.row_lanes = 4  # lanes that share a row
        self.warps_n = 1  # a warp owns whole rows of the tile
        self.options = (f"-arch={ARCH}",)  # compiler options a kernel with this engine needs
        self.specialised = False  # the library renders the warp-specialised kernel (LIBRARY_WS)
        self.maps: dict[str, str] | None = None  # role -> the TMA descriptor parameter (use_tma)
        self.batch_coord: dict[str, str] = {}  # role -> its map's batch coordinate (C), for a 3-D map (batch_view)
        self.pair = False  # CTAs in clusters of 2 along M sharing each B tile by multicast (use_tma)
        self.split = 1  # parts of K, one CTA each (split_parts; the plain kernel only)
        self.k_overshoot = False  # steps may start past K (a split's last part): every load tests K

    def use_tma(self, k, buffers: dict[str, str], pair: bool = False) -> None:
        """Load both operands with TMA: one descriptor parameter per operand, asked of kernel ``k``
        (``buffers``: role -> plan buffer). A K-major operand is one box per stage (64 of K, its
        BM or BN rows); an MN-major one a box of 64 MN-elements x BK per 64-wide atom. Either lands
        in exactly the 128-byte-swizzled layout this engine's descriptors read (the map's 128-byte
        swizzle is the XOR of address bits 4-6 with bits 7-9, and stage bases are 1024-aligned).
        ``pair`` (:func:`pairs`): the CTAs run in clusters of 2 along M, each loading half of the B
        tile (half its 64-wide boxes, or a box of half its rows) into both."""
        self.maps, self.pair = {}, pair
        for o in (self.a, self.b):
            rows = self.bm if o.role == "a" else self.bn // (2 if pair else 1)
            if o.k_major:
                dims, stride, box = (o.depth, o.extent), o.stride_mn * self.item, (64, rows)
            else:
                dims, stride, box = (o.extent, o.depth), o.stride_k * self.item, (64, self.bk)
            count, unit, terms = batch_view(o, k.p.domain)
            if terms:  # the batch as the map's outer dimension, one index a box
                assert not pair, "CTA pairs share 2-D boxes of B"
                dims, box = (*dims, count), (*box, 1)
                self.batch_coord[o.role] = " + ".join(f"(int)c{d}" + (f" * {w}" if w != 1 else "") for d, w in terms)
            self.maps[o.role] = k.tensor_map(f"tma_{o.role}", buffers[o.role], dims, stride, box,
                                             unit * self.item if terms else 0)

    # ------------------------------------------------------------------ shared memory
    def tile_bytes(self, o) -> int:
        return (self.bm if o.role == "a" else self.bn) * self.bk * self.item

    @property
    def stage_bytes(self) -> int:
        return self.tile_bytes(self.a) + self.tile_bytes(self.b)

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory to launch with (1 KiB of slack to align the base to 1024)."""
        return self.stages * self.stage_bytes + 1024

    def offsets(self, o) -> tuple[int, int]:
        """(LBO, SBO) in bytes of operand ``o``'s descriptor."""
        if o.k_major:
            return 16, 1024  # LBO ignored for swizzled K-major; SBO: 8 rows of 128 bytes
        lbo, sbo = self.bk * 128, 1024
        return (sbo, lbo) if self.swap_mn_offsets else (lbo, sbo)

    def slice_bytes(self, o) -> int:
        """How far the descriptor's start moves per 16-deep slice of K."""
        return 32 if o.k_major else 16 * 128

    def group_bytes(self, o) -> int:
        """Offset of warpgroup 1's 64 rows of A (one MN step of 64)."""
        return 64 * 128 if o.k_major else self.bk * 128

    def helpers(self) -> str:
        wait = WS_HELPERS_OUTLINED_TRAP if self.specialised and WS_TRAP_OUTLINED else WS_HELPERS
        return (HELPERS + self._mma_helper() + (TMA_HELPERS + wait if self.maps else "")
                + (TMA3_HELPERS if self.batch_coord else "") + (PAIR_HELPERS if self.pair else ""))

    def instruction(self) -> str:
        t = "f16" if self.dtype is DType.F16 else "bf16"
        return f"wgmma.mma_async.sync.aligned.m64n{self.bn}k16.f32.{t}.{t}"

    def _mma_helper(self) -> str:
        n = self.regs
        return self._wgmma_function("cvl_wgmma", accumulate=True) + f"""// Pins the accumulators between wgmma's asynchronous writes and ordinary reads or writes.
__device__ __forceinline__ void cvl_wgmma_pin(float (&d)[{n}]) {{
#pragma unroll
    for (int i = 0; i < {n}; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}}
"""

    def _wgmma_function(self, name: str, accumulate: bool) -> str:
        """One wgmma of the whole BN: ``D += A * B``, or with ``accumulate`` False (scale-d 0) ``D = A * B``."""
        n = self.regs
        regs = ", ".join(f"%{i}" for i in range(n))
        ta, tb = int(not self.a.k_major), int(not self.b.k_major)
        outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
        return f"""
// D (64 x {self.bn}, f32) {'+=' if accumulate else '='} A (64 x 16, descriptor) * B (16 x {self.bn}, descriptor); trans-a {ta}, trans-b {tb}
__device__ __forceinline__ void {name}(float (&d)[{n}], unsigned long long da, unsigned long long db) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n"
                 "{self.instruction()} {{{regs}}}, %{n}, %{n + 1}, p, 1, 1, {ta}, {tb};\\n}}\\n"
                 : {outs}
                 : "l"(da), "l"(db), "n"({int(accumulate)}));
}}
"""

    def set_helper(self) -> str:
        """``cvl_wgmma_set``: the wgmma with scale-d 0 (D = A * B, the old D unread), so a fresh tile
        needs no zeroing of registers that a wgmma in flight may own."""
        return self._wgmma_function("cvl_wgmma_set", accumulate=False)

    def setup(self) -> list[str]:
        a, b = self.a, self.b
        la, sa_ = self.offsets(a)
        lb, sb_ = self.offsets(b)
        return [
            "extern __shared__ __align__(1024) unsigned char cvl_smem[];",
            "const unsigned smem0 = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;",
            "const unsigned sa = smem0;",
            f"const unsigned sb = smem0 + {self.stages * self.tile_bytes(a)}u;",
            "const int lane = threadIdx.x % 32;",
            "const int wg = threadIdx.x / 128;",
            "const int wl = (threadIdx.x / 32) % 4;",
            f"const unsigned long long desc_a = cvl_wgmma_desc(sa + wg * {self.group_bytes(a)}u, {la}u, {sa_}u);",
            f"const unsigned long long desc_b = cvl_wgmma_desc(sb, {lb}u, {sb_}u);",
            f"float acc[{self.regs}];",
            *self._tma_setup(),
        ]

    def _tma_setup(self) -> list[str]:
        """TMA: one "full" mbarrier per stage (one arrival: the thread that issues the stage's copies,
        with the stage's bytes as its transaction count), initialised before any copy."""
        if not self.maps:
            return []
        empty = self.pair and not self.specialised  # (the warp-specialised kernel has its own release barriers)
        pair = ([  # a stage's "empty" barrier: the partner's one arrival when its copy of the stage is free
            f"__shared__ __align__(8) unsigned long long cvl_empty[{self.stages}];",
            "const unsigned empty0 = cvl_smem_addr(cvl_empty);"] if empty else []) + (
            ["const unsigned rank = blockIdx.x % 2;  // in the cluster: tiles mt, mt + 1 share B"] if self.pair else [])
        return [
            f"__shared__ __align__(8) unsigned long long cvl_full[{self.stages}];",
            "const unsigned full0 = cvl_smem_addr(cvl_full);", *pair,
            "if (threadIdx.x == 0) {",
            f"    cvl_tma_prefetch({self.maps['a']});",
            f"    cvl_tma_prefetch({self.maps['b']});",
            f"    for (int s = 0; s < {self.stages}; ++s) cvl_mbar_init(full0 + s * 8, 1);",
            *([f"    for (int s = 0; s < {self.stages}; ++s) cvl_mbar_init(empty0 + s * 8, 1);"] if empty else []),
            "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");",
            "}",
            "__syncthreads();",
            *(["cvl_pair_sync();  // the partner's barriers are set up before any copy or arrival reaches them"]
              if self.pair else []),
        ]

    def tma_load(self, stage: str, mn0: dict[str, str], k0: str) -> list[str]:
        """Thread 0 arms stage ``stage``'s barrier with the stage's bytes and issues its copies: A's rows
        ``mn0['a']..``, B's ``mn0['b']..``, K from ``k0`` (with ``pair``, its half of B into both CTAs;
        the partner's half completes on this barrier too)."""
        lines = ["if (threadIdx.x == 0) {", f"    const unsigned bar = full0 + ({stage}) * 8;",
                 f"    cvl_mbar_expect_tx(bar, {self.stage_bytes}u);"]
        for o in (self.a, self.b):
            smem = "sa" if o.role == "a" else "sb"
            base = f"{smem} + ({stage}) * {self.tile_bytes(o)}u"
            if o.role == "b" and self.pair:  # this CTA's half, into both
                if o.k_major:
                    half = self.bn // 2
                    lines.append(f"    cvl_tma_2d_mc({base} + rank * {half * 128}u, {self.maps['b']}, {k0}, "
                                 f"{mn0['b']} + (int)rank * {half}, bar, 3);")
                else:
                    boxes = self.bn // 128  # 64-wide boxes a CTA
                    for j in range(boxes):
                        lines.append(f"    cvl_tma_2d_mc({base} + (rank * {boxes} + {j}) * {self.bk * 128}u, "
                                     f"{self.maps['b']}, {mn0['b']} + ((int)rank * {boxes} + {j}) * 64, {k0}, bar, 3);")
                continue
            batch = self.batch_coord.get(o.role)
            copy, tail = ("cvl_tma_3d", f", {batch}, bar);") if batch else ("cvl_tma_2d", ", bar);")
            if o.k_major:
                lines.append(f"    {copy}({base}, {self.maps[o.role]}, {k0}, {mn0[o.role]}{tail}")
            else:
                rows = self.bm if o.role == "a" else self.bn
                for j in range(rows // 64):
                    lines.append(f"    {copy}({base} + {j * self.bk * 128}u, {self.maps[o.role]}, "
                                 f"{mn0[o.role]} + {j * 64}, {k0}{tail}")
        return lines + ["}"]

    def zero(self) -> list[str]:
        return ["#pragma unroll", f"for (int i = 0; i < {self.regs}; ++i) acc[i] = 0.0f;"]

    # ------------------------------------------------------------------ loads
    def _offset(self, o, mn: str, k: str, low3: str | None = None) -> str:
        """Byte offset in a stage tile of the 16-byte chunk starting at (mn, k); one of them is a
        multiple of 8. ``low3``: the tile row's low 3 bits (the swizzle's XOR), when known cheaper."""
        if o.k_major:
            low3 = low3 or f"(({mn}) & 7)"
            return f"(({mn}) * 128 + (((({k}) >> 3) ^ {low3}) << 4))"
        low3 = low3 or f"(({k}) & 7)"
        return f"((({mn}) >> 6) * {self.bk * 128} + ({k}) * 128 + ((((({mn}) & 63) >> 3) ^ {low3}) << 4))"

    def load(self, o, stage: str, mn0: str, k0: str, base: str) -> list[str]:
        """Copy one operand tile (rows mn0.., depth k0..) into shared stage ``stage``.

        Thread t copies chunk ``t % per_row`` of tile rows ``t / per_row + i * passes`` (a tile row
        is one contiguous run of 8 chunks for K-major, BM/BN / 8 for MN-major), so 8 or more
        consecutive threads read one contiguous 128-byte run and the per-row work is hoisted."""
        rows = self.bm if o.role == "a" else self.bn
        per_row = (self.bk if o.k_major else rows) // 8  # 16-byte chunks per contiguous row of the tile
        chunks = rows * self.bk // 8
        assert self.threads % per_row == 0, (chunks, self.threads, per_row)
        rp = self.threads // per_row  # tile rows per pass of the block
        passes = -(-chunks // self.threads)  # the last one partial when the block does not divide the tile
        depth_rows = self.bk if not o.k_major else rows  # tile rows (r) of this operand
        smem = "sa" if o.role == "a" else "sb"
        it = self.index_t
        lines = ["{", f"    const int r0 = (int)(threadIdx.x / {per_row}u);",
                 f"    const int cc = (int)(threadIdx.x % {per_row}u) * 8;",
                 "#pragma unroll", f"    for (int i = 0; i < {passes}; ++i) {{",
                 f"        const int r = r0 + i * {rp};"]
        if chunks % self.threads:
            lines.append(f"        if (r >= {depth_rows}) break;")
        mn, kk = ("r", "cc") if o.k_major else ("cc", "r")
        low3 = "(r0 & 7)" if rp % 8 == 0 else None
        offset = self._offset(o, mn, kk, low3)
        # tiles never start past the ends, so an extent that is a multiple of the tile needs no test
        checks = ([f"gmn < {o.extent}"] if o.extent % rows else []) + (
            [f"gk < {o.depth}"] if o.depth % self.bk or self.k_overshoot else [])
        lines += [
            f"        const int gmn = {mn0} + {mn};", f"        const int gk = {k0} + {kk};",
            f"        const bool ok = {' && '.join(checks) or 'true'};",
            f"        const unsigned dst = {smem} + ({stage}) * {self.tile_bytes(o)}u + {offset};",
            f"        const {self.storage}* src = {base} + ({it})gmn * {o.stride_mn} + ({it})gk * {o.stride_k};",
            f"        cvl_cp_async16s(dst, ok ? src : {base}, ok);",
            "    }", "}",
        ]
        return lines

    # ------------------------------------------------------------------ math
    def compute(self, stage: str) -> list[str]:
        a, b = self.a, self.b
        da = f"(({stage}) * {self.tile_bytes(a)} + kk * {self.slice_bytes(a)}) >> 4"
        db = f"(({stage}) * {self.tile_bytes(b)} + kk * {self.slice_bytes(b)}) >> 4"
        return [
            "cvl_wgmma_fence();",
            "#pragma unroll",
            f"for (int kk = 0; kk < {self.bk // 16}; ++kk) {{",
            f"    const unsigned long long da = desc_a + ({da});",
            f"    const unsigned long long db = desc_b + ({db});",
            "    cvl_wgmma(acc, da, db);",
            "}",
            "cvl_wgmma_commit();",
        ]

    def main_loop(self, steps: int, k0: StepExpr, n0: StepExpr, m0: str, bases: tuple[str, str],
                  after_step: Sequence[str]) -> list[str]:
        """All steps; ``after_step`` runs after each step's math with every wgmma retired
        (that costs the overlap of consecutive steps, so the plain GEMM passes none)."""
        s, p, w = self.stages, self.ahead, self.pending
        if self.maps:
            return self._tma_main_loop(steps, k0, n0, m0, after_step)

        def load(stage: str, step: str) -> list[str]:
            return (self.load(self.a, stage, m0, k0(step), bases[0])
                    + self.load(self.b, stage, n0(step), k0(step), bases[1]))

        out = ["cvl_wgmma_pin(acc);"]
        for i in range(p):
            out += [f"if ({i} < {steps}) {{", *_indent(load(str(i), str(i))), "}", "cvl_cp_commit();"]
        body = [f"cvl_cp_wait<{p - 1}>();", "cvl_fence_proxy_async();", "__syncthreads();",
                f"if (step + {p} < {steps}) {{", *_indent(load(f"(step + {p}) % {s}", f"(step + {p})")), "}",
                "cvl_cp_commit();", *self.compute(f"step % {s}"), f"cvl_wgmma_wait<{w}>();"]
        if after_step:
            body += ["cvl_wgmma_wait<0>();", "cvl_wgmma_pin(acc);", *after_step]
        out += ["#pragma unroll 1", f"for (int step = 0; step < {steps}; ++step) {{", *_indent(body), "}",
                "cvl_wgmma_wait<0>();", "cvl_wgmma_pin(acc);"]
        return out

    def _tma_main_loop(self, steps: int, k0: StepExpr, n0: StepExpr, m0: str, after_step: Sequence[str]) -> list[str]:
        """:meth:`main_loop` with TMA loads. Step ``s``: every thread waits for tile ``s``'s barrier
        phase (``s / S`` is its use count, so its parity is ``(s / S) & 1``); ``__syncthreads``; thread
        0 arms and fills the stage of tile ``s + P``, which tile ``s - 1 - W`` used (every warpgroup
        retired that one's wgmma before the barrier, as in the cp.async loop); then the wgmma. A
        stage's barrier is re-armed only after every thread waited on its previous phase (the
        barrier of the step in between), so no wait can see a phase two ahead. With
        :data:`REFILL_FIRST` the barrier and the refill come before the wait for tile ``s``."""
        s, p, w = self.stages, self.ahead, self.pending

        def load(stage: str, step: str) -> list[str]:
            return self.tma_load(stage, {"a": m0, "b": n0(step)}, k0(step))

        # with pair: our copy of the refilled stage is free after the block barrier (told to the partner
        # at once), the stage once the partner's copy is too (the k-th refill of a stage by the loop, at
        # steps c + k S, waits for the k-th phase of its empty barrier), waited for after the step's
        # wgmma are issued. Every thread waits: a wait loop on thread 0's divergent path makes ptxas
        # serialize the wgmma (C7518)
        ours = ([f"if (step + {p} < {steps} && threadIdx.x == 0)",
                 f"    cvl_mbar_arrive_cta(empty0 + ((step + {p}) % {s}) * 8, rank ^ 1u);  // our copy is free"]
                if self.pair else [])
        free = ([f"cvl_mbar_wait(empty0 + ((step + {p}) % {s}) * 8, (step / {s}) & 1);  // and the partner's"]
                if self.pair else [])
        out = ["cvl_wgmma_pin(acc);"]
        for i in range(p):
            out += [f"if ({i} < {steps}) {{", *_indent(load(str(i), str(i))), "}"]
        refill = [f"if (step + {p} < {steps}) {{", *_indent([*free, *load(f"(step + {p}) % {s}", f"(step + {p})")]), "}"]
        # with pair, after the step's wgmma are issued: thread 0's wait for its partner then runs under them
        wait = [f"cvl_mbar_wait(full0 + (step % {s}) * 8, (step / {s}) & 1);"]
        if REFILL_FIRST and not self.pair:  # the barrier first: every thread waited on the refilled stage's last phase
            # at step - 1 - W and retired that step's wgmma at the end of step - 1, both before this barrier
            body = ["__syncthreads();", *refill, *wait, *self.compute(f"step % {s}"), f"cvl_wgmma_wait<{w}>();"]
        else:
            body = [*wait, "__syncthreads();", *ours, *([] if self.pair else refill), *self.compute(f"step % {s}"),
                    *(refill if self.pair else []), f"cvl_wgmma_wait<{w}>();"]
        if after_step:
            body += ["cvl_wgmma_wait<0>();", "cvl_wgmma_pin(acc);", *after_step]
        out += ["#pragma unroll 1", f"for (int step = 0; step < {steps}; ++step) {{", *_indent(body), "}",
                "cvl_wgmma_wait<0>();", "cvl_wgmma_pin(acc);"]
        return out

    def slot_row(self, slot: str) -> str:
        return f"(wg * 64 + wl * 16 + ({slot}) * 8 + lane / 4)"

    def column_warp(self) -> str:
        return "0"

    # ------------------------------------------------------------------ accumulator elements
    def elements(self, m0: str, n0: str, body: Sequence[str]) -> list[str]:
        """``body`` once per accumulator element, with ``m``, ``n``, ``ACC`` and ``slot`` defined."""
        return ["#pragma unroll", f"for (int ni = 0; ni < {self.bn // 8}; ++ni)",
                "#pragma unroll", "for (int h = 0; h < 2; ++h)",
                "#pragma unroll", "for (int q = 0; q < 2; ++q) {",
                f"    const int m = {m0} + wg * 64 + wl * 16 + lane / 4 + h * 8;",
                f"    const int n = {n0} + ni * 8 + lane % 4 * 2 + q;",
                "    const int slot = h;", "    float& ACC = acc[ni * 4 + h * 2 + q];",
                *_indent(body), "}"]


    def pairs(self, m0: str, n0: str, body: Sequence[str]) -> list[str]:
        """``body`` once per pair of adjacent accumulator columns (n, n + 1), n even: ``m``, ``n``
        (the even column), ``slot``, and ``ACC0`` / ``ACC1`` (columns n and n + 1) defined."""
        return ["#pragma unroll", f"for (int ni = 0; ni < {self.bn // 8}; ++ni)",
                "#pragma unroll", "for (int h = 0; h < 2; ++h) {",
                f"    const int m = {m0} + wg * 64 + wl * 16 + lane / 4 + h * 8;",
                f"    const int n = {n0} + ni * 8 + lane % 4 * 2;",
                "    const int slot = h;", "    (void)slot;",
                "    float& ACC0 = acc[ni * 4 + h * 2];", "    float& ACC1 = acc[ni * 4 + h * 2 + 1];",
                *_indent(body), "}"]


def _indent(lines: Sequence[str], by: str = "    ") -> list[str]:
    return [by + line if line else line for line in lines]


# ---------------------------------------------------------------------- a standalone kernel
# Variants of the standalone kernel (:func:`gemm_bias_gelu_source`) for benchmarks/ab_wgmma.py to
# time side by side; an empty dict is the kernel the library renders. Keys (keyword arguments of
# gemm_bias_gelu_source override them):
#   "raster": 0 walks tiles row-major (the library's order); G > 0 walks groups of G row tiles
#       column by column (the blocks in flight share fewer, hotter A and B panels in L2).
#   "persistent": grid = min(SMs, tiles), block b takes tiles b, b + grid, ...; the cp.async stream
#       runs across tile boundaries, so the first stages of the next tile are in flight while
#       the gelu epilogue of the current one runs (and no block launch / prologue per tile).
#   "pack": the epilogue converts and stores pairs of columns as one f16x2 (bf16x2) value
#       with one paired bias load (N even), instead of one 2-byte store per element.
#   "ws": warp specialisation (implies "persistent"): warpgroup 0 only loads (cp.async, completion
#       signalled on a per-stage "full" mbarrier by cp.async.mbarrier.arrive), the BM / 64
#       consumer warpgroups only multiply and run the epilogue, releasing each stage on an "empty"
#       mbarrier once its wgmma retired; no block-wide barrier per k step, and the producer
#       runs up to ``stages`` k tiles ahead (through the epilogue too). setmaxnreg moves registers
#       from the producer to the consumers (:func:`ws_regs`). A barrier that does
#       not complete within about a second traps (a CUDA error, not a hang).
TUNING: dict = {}
WS_PRODUCER_REGS = 56  # setmaxnreg of the producer; the consumers take what it gives back (at most 240)


def ws_entry_regs(threads: int) -> int:
    """Registers per thread a ``__launch_bounds__(threads, 1)`` kernel gets at entry (ptxas's cap,
    which it allocates in full when the kernel uses setmaxnreg: tests check the report)."""
    return min(255, 65536 // threads) // 8 * 8


def ws_regs(consumer_threads: int) -> tuple[int, int]:
    """setmaxnreg counts (producer, consumers), multiples of 8: the consumers' increase must be
    covered by what the producer warpgroup releases (the block's pool is fixed at launch;
    ``setmaxnreg.inc`` waits for registers, so asking for more would hang)."""
    entry = ws_entry_regs(consumer_threads + 128)
    freed = (entry - WS_PRODUCER_REGS) * 128
    return WS_PRODUCER_REGS, min(240, (entry + freed // consumer_threads) // 8 * 8)
SM_COUNT = 132  # H100/H200 SXM: the persistent grid when the caller does not say


@dataclass(frozen=True)
class StandaloneKernel:
    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    engine: WgmmaEngine
    tiles: int = 0  # output tiles
    persistent: bool = False  # grid may be any size from 1 to tiles (see grid_for)

    def grid_for(self, sm_count: int) -> tuple[int, int, int]:
        """The launch grid on a device with ``sm_count`` multiprocessors."""
        return (min(self.tiles, sm_count), 1, 1) if self.persistent else self.grid


def _tile_function(mt: int, nt: int, bm: int, bn: int, raster: int) -> str:
    """``cvl_tile(t, m0, n0)``: the origin of output tile ``t`` in the chosen walk order."""
    if raster <= 0 or raster >= mt:
        body = [f"const int mi = t / {nt};", f"const int ni = t - mi * {nt};"]
    else:
        g = raster
        body = [f"const int group = t / {g * nt};", f"const int first = group * {g};",
                f"const int rows = min({mt} - first, {g});", f"const int r = t - group * {g * nt};",
                "const int mi = first + r % rows;", "const int ni = r / rows;"]
    return ("__device__ __forceinline__ void cvl_tile(int t, int& m0, int& n0) {\n"
            + "".join(f"    {line}\n" for line in body)
            + f"    m0 = mi * {bm};\n    n0 = ni * {bn};\n}}\n")


def _epilogue(eng: WgmmaEngine, M: int, N: int, m0: str, n0: str, index_t: str, pack: bool) -> list[str]:
    """y = gelu(acc + bias) for the tile at (m0, n0)."""
    dtype = eng.dtype
    to_f = "__half2float" if dtype is DType.F16 else "__bfloat162float"
    from_f = "__float2half_rn" if dtype is DType.F16 else "__float2bfloat16_rn"
    gelu = "0.5f * {x} * (1.0f + erff({x} * 0.70710678118654752f))"
    if not pack or N % 2:
        body = ["(void)slot;", f"if (m < {M} && n < {N}) {{",
                f"    const float x = ACC + {to_f}(bias[n]);",
                f"    const float g = {gelu.format(x='x')};",
                f"    y[({index_t})m * {N} + n] = {from_f}(g);", "}"]
        return eng.elements(m0, n0, body)
    pair = "__half2" if dtype is DType.F16 else "__nv_bfloat162"
    to_f2 = "__half22float2" if dtype is DType.F16 else "__bfloat1622float2"
    from_f2 = "__floats2half2_rn" if dtype is DType.F16 else "__floats2bfloat162_rn"
    # a pair (n, n + 1) with n even is all in or all out when N is even
    return ["#pragma unroll", f"for (int ni = 0; ni < {eng.bn // 8}; ++ni) {{",
            f"    const int n = {n0} + ni * 8 + lane % 4 * 2;",
            f"    const float2 bv = n < {N} ? {to_f2}(*reinterpret_cast<const {pair}*>(bias + n)) "
            ": make_float2(0.0f, 0.0f);",
            "#pragma unroll", "    for (int h = 0; h < 2; ++h) {",
            f"        const int m = {m0} + wg * 64 + wl * 16 + lane / 4 + h * 8;",
            f"        if (m < {M} && n < {N}) {{",
            "            const float x0 = acc[ni * 4 + h * 2] + bv.x;",
            "            const float x1 = acc[ni * 4 + h * 2 + 1] + bv.y;",
            f"            *reinterpret_cast<{pair}*>(y + ({index_t})m * {N} + n) = "
            f"{from_f2}({gelu.format(x='x0')}, {gelu.format(x='x1')});",
            "        }", "    }", "}"]




def gemm_bias_gelu_source(M: int, N: int, K: int, *, entry: str = "gemm_bias_gelu_wgmma", bm: int = 128,
                          bn: int = 256, stages: int = 4, pending: int = 1, b_k_major: bool = False,
                          swap_mn_offsets: bool = False, dtype: DType = DType.F16, raster: int | None = None,
                          persistent: bool | None = None, pack: bool | None = None, ws: bool | None = None,
                          probe: str = "", sm_count: int = SM_COUNT) -> StandaloneKernel:
    """``y = gelu(a @ b + bias)`` rounded to ``dtype``: a [M, K] row-major, b [K, N] row-major (or
    [N, K] when ``b_k_major``), bias [N]; the shape of the kernel ``_GemmKernel.render_plain`` makes,
    with this engine in place of :class:`MmaEngine`. ``raster``, ``persistent``, ``pack``, ``ws``: the
    variants of :data:`TUNING` (None: take it from there). ``probe`` "loads" / "mma": the same kernel
    with no wgmma / no copies (wrong results; its time bounds what the other half costs). A persistent
    kernel runs on any grid from 1 to ``tiles`` blocks (:meth:`StandaloneKernel.grid_for`); ``grid``
    is the one for ``sm_count``."""
    raster = int(TUNING.get("raster", 0) if raster is None else raster)
    persistent = bool(TUNING.get("persistent", False) if persistent is None else persistent)
    pack = bool(TUNING.get("pack", False) if pack is None else pack)
    ws = bool(TUNING.get("ws", False) if ws is None else ws)
    persistent = persistent or ws
    a = WgmmaOperand("a", "a", dtype, M, K, True, K, 1)
    b = (WgmmaOperand("b", "b", dtype, N, K, True, K, 1) if b_k_major
         else WgmmaOperand("b", "b", dtype, N, K, False, 1, N))
    index_t = "long long" if max(M * K, K * N, M * N) > 2**30 else "int"
    eng = WgmmaEngine(a, b, bm=bm, bn=bn, stages=stages, pending=pending, index_t=index_t,
                      swap_mn_offsets=swap_mn_offsets)
    mt, nt, kt = -(-M // bm), -(-N // bn), -(-K // eng.bk)
    tiles = mt * nt
    st = eng.storage
    threads = eng.threads + (128 if ws else 0)
    if probe:  # a timing probe, wrong results: the same kernel without its math or without its copies
        import copy

        eng = copy.copy(eng)
        if probe == "loads":  # empty wgmma groups keep the wait_group accounting
            eng.compute = lambda stage: ["cvl_wgmma_fence();", "cvl_wgmma_commit();"]
        elif probe == "mma":  # wgmma on whatever the stages hold
            eng.load = lambda *args, **kwargs: []
        else:
            raise ValueError(f"probe: 'loads' or 'mma', not {probe!r}")
    lines = [
        f"extern \"C\" __global__ void __launch_bounds__({threads}, 1)",
        f"{entry}(const {st}* __restrict__ a, const {st}* __restrict__ b, const {st}* __restrict__ bias,",
        f"    {st}* __restrict__ y) {{",
    ]
    inner = eng.setup() + eng.zero()
    if ws:
        inner = _specialised(eng, kt, tiles, _epilogue(eng, M, N, "em0", "en0", index_t, pack))
        grid = (min(tiles, sm_count), 1, 1)
    elif not persistent:
        inner += ["int m0, n0;", "cvl_tile(blockIdx.x, m0, n0);"]
        inner += eng.main_loop(kt, lambda s: f"({s}) * {eng.bk}", lambda s: "n0", "m0", ("a", "b"), [])
        inner += _epilogue(eng, M, N, "m0", "n0", index_t, pack)
        grid = (tiles, 1, 1)
    else:
        inner += _persistent_loop(eng, kt, tiles, _epilogue(eng, M, N, "em0", "en0", index_t, pack))
        grid = (min(tiles, sm_count), 1, 1)
    lines += _indent(inner) + ["}"]
    header = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
    source = (header + eng.helpers() + (WS_HELPERS if ws else "") + _tile_function(mt, nt, bm, bn, raster) + "\n"
              + "\n".join(lines) + "\n")
    smem = eng.shared_bytes + (16 * eng.stages if ws else 0)
    return StandaloneKernel(source, entry, grid, (threads, 1, 1), smem, eng, tiles, persistent)


def _my_tiles(tiles: int, pair: bool = False) -> str:
    """Tiles block ``blockIdx.x`` owns: ``blockIdx.x + i * gridDim.x`` below ``tiles``; with ``pair``, the
    pair tiles its cluster of 2 owns (``blockIdx.x / 2 + i * gridDim.x / 2``)."""
    unit, units = ("(int)(blockIdx.x / 2)", "(int)(gridDim.x / 2)") if pair else ("(int)blockIdx.x", "(int)gridDim.x")
    return f"const int my_tiles = ({unit} < {tiles}) ? ({tiles} - 1 - {unit}) / {units} + 1 : 0;"


def _persistent_loop(eng: WgmmaEngine, kt: int, tiles: int, epilogue: Sequence[str]) -> list[str]:
    """Tiles ``blockIdx.x + i * gridDim.x`` one after another as one stream of ``total`` k steps
    (step g: tile g / kt, k tile g % kt), pipelined exactly like :meth:`WgmmaEngine.main_loop`:
    the copies of step g + P are issued at step g whichever tile it belongs to, into the stage
    step g - 1 - W used. After a tile's last step: wait for every wgmma, the epilogue (the next
    tile's first P k tiles are in flight meanwhile), zero the accumulators."""
    s, p, w = eng.stages, eng.ahead, eng.pending

    def load(step: str) -> list[str]:
        return ["{", f"    const int gl = {step};", f"    const int lt = gl / {kt};",
                f"    const int lk = (gl - lt * {kt}) * {eng.bk};", "    int lm0, ln0;",
                "    cvl_tile(blockIdx.x + lt * gridDim.x, lm0, ln0);",
                *_indent(eng.load(eng.a, f"gl % {s}", "lm0", "lk", "a")),
                *_indent(eng.load(eng.b, f"gl % {s}", "ln0", "lk", "b")), "}"]

    out = [_my_tiles(tiles),
           f"const int total = my_tiles * {kt};", "cvl_wgmma_pin(acc);"]
    for i in range(p):
        out += [f"if ({i} < total) {{", *_indent(load(str(i))), "}", "cvl_cp_commit();"]
    body = [f"cvl_cp_wait<{p - 1}>();", "cvl_fence_proxy_async();", "__syncthreads();",
            f"if (g + {p} < total) {{", *_indent(load(f"g + {p}")), "}",
            "cvl_cp_commit();", *eng.compute(f"g % {s}"), f"cvl_wgmma_wait<{w}>();",
            f"if (g % {kt} == {kt - 1}) {{",
            "    cvl_wgmma_wait<0>();", "    cvl_wgmma_pin(acc);", "    int em0, en0;",
            f"    cvl_tile(blockIdx.x + (g / {kt}) * gridDim.x, em0, en0);",
            *_indent(list(epilogue)), *_indent(eng.zero()), "    cvl_wgmma_pin(acc);", "}"]
    out += ["#pragma unroll 1", "for (int g = 0; g < total; ++g) {", *_indent(body), "}", "cvl_wgmma_wait<0>();"]
    return out


MBAR_HELPERS = r"""
__device__ __forceinline__ void cvl_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void cvl_mbar_arrive(unsigned bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(bar) : "memory");
}
// arrives on bar once every cp.async this thread issued so far has landed (no pending-count increment)
__device__ __forceinline__ void cvl_cp_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}
"""

_MBAR_WAIT = r"""// waits until the phase of parity `parity` of bar completed; traps after about 2^31 cycles
__device__ __forceinline__ void cvl_mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    if (done) return;
    const long long t0 = clock64();
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (!done && clock64() - t0 > (1ll << 31)) ON_TIMEOUT
    } while (!done);
}
"""

WS_HELPERS = MBAR_HELPERS + _MBAR_WAIT.replace("ON_TIMEOUT", "__trap();")
# The same wait with the trap in a function of its own: an inlined __trap() caps ptxas's registers at the
# launch bounds' entry count even after setmaxnreg.inc (a consumer warpgroup given 240 spilled at 168);
# outlined, the consumers get what setmaxnreg gives them.
WS_HELPERS_OUTLINED_TRAP = (MBAR_HELPERS + "__device__ __noinline__ void cvl_hang() { __trap(); }\n"
                            + _MBAR_WAIT.replace("ON_TIMEOUT", "cvl_hang();"))


def _standalone_tile(t: str, m0: str, n0: str) -> list[str]:
    return [f"int {m0}, {n0};", f"cvl_tile({t}, {m0}, {n0});"]


def _specialised(eng: WgmmaEngine, kt: int, tiles: int, epilogue: Sequence[str],
                 decode: Callable[[str, str, str], list[str]] = _standalone_tile,
                 bases: tuple[str, str] = ("a", "b")) -> list[str]:
    """The body of the warp-specialised persistent kernel (TUNING "ws"): the k-step stream of
    :func:`_persistent_loop`, with warpgroup 0 loading and warpgroups 1.. multiplying.

    Stage ``g % S`` holds step g; its n-th use (n = g / S) completes phase n of ``full[stage]``
    (128 producer arrivals, each when that thread's copies landed) and, once every consumer
    thread has retired the wgmma that read it, phase n of ``empty[stage]``. The producer waits
    for phase n - 1 of ``empty`` before refilling (parity (n - 1) & 1), the consumers for phase n
    of ``full`` (parity n & 1). Consumer step g releases step g - W's stage after ``wait_group W``.
    ``decode(t, m0, n0)``: lines defining tile ``t``'s origin ``m0``, ``n0`` (and whatever ``bases``,
    the operand pointers the loads start from, and ``epilogue`` need); the producer's tile is decoded
    as (lm0, ln0), the consumers' as (em0, en0).

    With TMA (``eng.maps``: :meth:`WgmmaEngine.use_tma`) one thread of the producer warpgroup arms
    ``full[stage]`` (the engine's one-arrival barriers, phase n completing when stage's bytes of its
    n-th use have landed) and issues the stage's tensor copies; the other producer threads leave once
    their registers are given back."""
    import copy

    s, w = eng.stages, eng.pending
    tma = bool(eng.maps)
    regs = ws_regs(eng.threads)
    prod = copy.copy(eng)
    prod.threads = 128  # the producer warpgroup copies whole tiles alone
    consumers = eng.threads
    setup = [line.replace("const int wg = threadIdx.x / 128;", "const int wg = (int)(threadIdx.x / 128) - 1;")
             for line in eng.setup()]
    assert any("threadIdx.x / 128) - 1" in line for line in setup)
    pair = eng.pair  # clusters of 2 along M sharing B (tiles are pair tiles; a stage's release counts both)
    unit, units = ("(int)(blockIdx.x / 2)", "(int)(gridDim.x / 2)") if pair else ("blockIdx.x", "gridDim.x")
    releases = 2 * consumers // 32 if pair else consumers  # per stage: each consumer warp's of both CTAs, or each thread's
    out = setup + [
        f"const unsigned bars = smem0 + {eng.stages * eng.stage_bytes}u;  // full[s]: +8 s; empty[s]: +8 (S + s)",
        _my_tiles(tiles, pair),
        f"const int total = my_tiles * {kt};",
        "if (threadIdx.x == 0) {",
        f"    for (int i = 0; i < {s}; ++i) {{",
        "        cvl_mbar_init(bars + 8 * i, 128u);",
        f"        cvl_mbar_init(bars + 8 * ({s} + i), {releases}u);",
        "    }",
        "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");",
        "}",
        "__syncthreads();",
        *(["cvl_pair_sync();  // the partner's release barriers are set up before any arrival reaches them"]
          if pair else []),
    ]
    load = ["const int lt = g / " + str(kt) + ";", f"const int lk = (g - lt * {kt}) * {eng.bk};",
            *decode(f"{unit} + lt * {units}", "lm0", "ln0")]
    if tma:
        load += eng.tma_load("stage", {"a": "lm0", "b": "ln0"}, "lk")
    else:
        load += [*prod.load(eng.a, "stage", "lm0", "lk", bases[0]), *prod.load(eng.b, "stage", "ln0", "lk", bases[1])]
    loop = ["#pragma unroll 1",
            "for (int g = 0; g < total; ++g) {",
            f"    const int stage = g % {s};",
            f"    if (g >= {s}) cvl_mbar_wait(bars + 8 * ({s} + stage), ((g / {s}) - 1) & 1);",
            *_indent(load),
            *([] if tma else ["    cvl_cp_arrive(bars + 8 * stage);"]),
            "}"]
    producer = [
        f"asm volatile(\"setmaxnreg.dec.sync.aligned.u32 {regs[0]};\\n\" ::: \"memory\");",
        *(["if (threadIdx.x == 0) {  // the copies of every stage", *_indent(loop), "}"] if tma
          else [*loop, "cvl_cp_wait<0>();  // nothing outstanding at exit"]),
    ]
    full = "full0 + 8 * stage" if tma else "bars + 8 * stage"
    released = f"bars + 8 * ({s} + (g - {w}) % {s})" if w else f"bars + 8 * ({s} + stage)"
    if pair:  # each warp once it retired the stage's wgmma: lane 0 to this CTA's barrier, lane 1 to the partner's
        release = ([f"if (g >= {w}) {{"] if w else ["{"]) + [
            "    __syncwarp();", f"    if (lane == 0) cvl_mbar_arrive({released});",
            f"    else if (lane == 1) cvl_mbar_arrive_cta({released}, rank ^ 1u);", "}"]
    else:
        release = [f"if (g >= {w}) cvl_mbar_arrive({released});" if w else f"cvl_mbar_arrive({released});"]
    consumer = [
        f"asm volatile(\"setmaxnreg.inc.sync.aligned.u32 {regs[1]};\\n\" ::: \"memory\");",
        *eng.zero(),
        "cvl_wgmma_pin(acc);",
        "#pragma unroll 1",
        "for (int g = 0; g < total; ++g) {",
        f"    const int stage = g % {s};",
        f"    cvl_mbar_wait({full}, (g / {s}) & 1);",
        *([] if tma else ["    cvl_fence_proxy_async();  // copies land through the generic proxy, wgmma reads through the async one"]),
        *_indent(eng.compute("stage")),
        f"    cvl_wgmma_wait<{w}>();",
        *_indent(release),
        f"    if (g % {kt} == {kt - 1}) {{",
        "        cvl_wgmma_wait<0>();", "        cvl_wgmma_pin(acc);",
        *_indent(decode(f"{unit} + (g / {kt}) * {units}", "em0", "en0"), "        "),
        *_indent(list(epilogue), "        "), *_indent(eng.zero(), "        "), "        cvl_wgmma_pin(acc);",
        "    }",
        "}",
        "cvl_wgmma_wait<0>();",
    ]
    return out + ["if (threadIdx.x < 128) {", *_indent(producer), "} else {", *_indent(consumer), "}",
                  *(["cvl_pair_sync();  // no CTA leaves while its partner may still arrive on its barriers"]
                    if pair else [])]
