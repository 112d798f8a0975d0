#!/usr/bin/env python3
"""A/B: the sm_90a wgmma GEMM (cuvil_dsl.codegen.cuda_wgmma) against torch and cuBLAS.

    python3 benchmarks/ab_wgmma.py [--samples 30] [--configs 128x256s4p1,128x256s4p1-pers-h2,...]

Builds ``y = gelu(a @ b + bias)`` (f16: a [M, K], b [K, N] row-major, bias [N]) with the wgmma
engine for 4096^3 and 1024 x 2048 x 512 (plus two check-only cases: ragged sizes, and b stored
[N, K]), compiles with cuvil-dsl's compile service for sm_90a (registers, spills, HGMMA count
printed), checks every kernel against a float64 CuPy reference (|y - ref| <= 2e-2 + 2e-2 |ref|),
and times the ones that pass as ``cuvil-dsl bench`` does (``bench.timing.GpuTimer``: warm-up, L2
flushed and CUDA events around every sample, median)
next to torch ``F.gelu(a @ b + bias)`` and ``cupy.matmul(a, b)``. A markdown table goes to stdout
and to ``$OUT/ab_wgmma.md`` when OUT is set.

The library's own kernel for benchmarks/gemm_gelu_f16.yaml (plan_pipeline + render_cuda, the generic
epilogue) is built under each of :data:`LIBRARY_MODES` (cuda_wgmma.PAIRED_STORES / LARGE_TILE: the new
default, 128 x 256 with paired stores, the previous default, and LIBRARY_WS: the warp-specialised
kernel), checked against float64 on ragged sizes and the timed ones, and timed (first; the
warp-specialised one last of all). ``--no-library`` skips them; ``--library-modes A,B`` builds only
the modes whose labels contain A or B (and the default).

A config is ``BMxBNsSTAGESpPENDING`` plus variant flags of ``cuda_wgmma.TUNING``, joined by ``-``:
``rG`` (tiles walked in groups of G row tiles), ``pers`` (persistent grid of one block per SM,
the next tile's loads in flight during the epilogue), ``ws`` (persistent and warp-specialised:
a producer warpgroup, mbarriers, setmaxnreg), ``h2`` (f16x2 epilogue stores); and timing probes,
not checked (their results are wrong): ``noload`` (no copies: the wgmma + epilogue time) and
``nomma`` (no wgmma: the copy pipeline + epilogue time). The first
config is the baseline (the library's default). Every config is also checked on ragged sizes
(persistent ones on a grid of 5 blocks too, so each block walks several ragged tiles); the first
with b stored [N, K].

If a kernel's check fails, the same configuration is rebuilt with the LBO and SBO of the
MN-major (b) descriptor exchanged and checked again, so one GPU run settles that encoding
(the table says which one passed). Exit status: 0 all checked kernels passed, 1 a check
failed or a CUDA error (reported) happened, 2 no GPU / no CuPy (after compiling).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings  # noqa: E402
from cuvil_dsl.codegen.cuda_wgmma import gemm_bias_gelu_source  # noqa: E402
from cuvil_dsl.compile import CompileUnit, compile_units  # noqa: E402

ARCH = "sm_90a"
RTOL = ATOL = 2e-2
TIMED = [(4096, 4096, 4096), (1024, 2048, 512)]
CHECK_ONLY = [((1000, 1000, 520), False), ((1024, 2048, 512), True)]  # (sizes, b stored [N, K])
RAGGED = (1000, 1000, 520)
_CFG = re.compile(r"(\d+)x(\d+)s(\d+)p(\d+)")
DEFAULT_CONFIGS = ",".join([
    "128x256s4p1",  # the library's previous default for large GEMMs: the baseline
    "128x256s4p1-h2",
    # last: a deadlock in these traps (a CUDA error ends the run after the rows so far)
    "256x128s4p1-ws-h2",
])
# (More variants, measured on the H200 2026-11-29: 128x256s4p0, 256x128s4p1, 128x256s4p1-r8, -pers,
# -pers-h2, -pers-h2-r8, 256x128s4p1-pers-h2, 192x256s4p1-h2, 192x256s4p1-pers-h2, 128x128s3p0, the
# probes 128x256s4p1-noload / -nomma, 128x256s4p1-ws-h2, 128x256s4p0-ws-h2, 128x256s4p1-ws-h2-r8.)
# The library's kernel for benchmarks/gemm_gelu_f16.yaml (rendered through plan_pipeline / render_cuda)
# under cuda_wgmma's switches: (label, PAIRED_STORES, LARGE_TILE); timed on TIMED, checked on RAGGED too.
LIBRARY_SPEC = Path(__file__).resolve().parent / "gemm_gelu_f16.yaml"
# ragged; the second large enough for LARGE_TILE (384 blocks); the third split along K (64 tiles, 2 parts of 33
# k steps, the last one's final step past K)
LIBRARY_CHECKS = [RAGGED, (4000, 3000, 520), (1000, 1000, 4104), (2900, 3000, 520)]  # the fourth: 23 row tiles
# of 128, a last group of fewer rows in every grouped walk order (cuda_wgmma.RASTER_ROWS)
# (label, PAIRED_STORES, LARGE_TILE, LIBRARY_WS, TMA); the warp-specialised ones run last of all (a
# barrier that never completes traps, and a CUDA error ends the run). 2026-11-29: 128x256 paired
# 217.7 us, 256x128 paired 229.2, per-element stores 250.1, warp-specialised 231.9 (all cp.async).
# 2026-11-30: TMA 128x256 s4p1 202.2 (204.7 with GpuTimer), cp.async 215.0 (242.7), TMA s4p0 228.3,
# TMA 256x128 205.1 (220.0). Round 3: smaller tiles whose 2 blocks per SM overlap one's epilogue
# with the other's main loop, now that TMA loads need few registers.
# Round 3 (GpuTimer): default 223.2, 128x128 s3p0 268.9, s3p1 266.5, 128x256 s3p1 277.3 (the smaller
# tiles' extra loads cost more than the overlap gained). Session 6: the warp-specialised persistent
# kernel loading by TMA (one producer thread arms each stage's barrier and issues its tensor copies;
# the two consumer warpgroups' gelu epilogue runs while the producer already fills the next tile's
# stages; no block launch, prologue or pipeline fill per tile). Predicted 193-200 us (from 202-205).
# Measured (2026-11-30, --rounds 4): in the first pass 211.4 against 225.8 for the default, but
# round-robin 238.3 / 256.1 / 238.8 / 246.7 against 233.8 / 251.0 / 239.6 / 243.3 (this script's
# timings drift by 5% between passes; the first one ran the default first, on a cold GPU): no gain.
# `cuvil-dsl bench` with it as the default: 205.1 us (the plain kernel 204.7 a session earlier).
# Left off by default (LIBRARY_WS False); the prediction was wrong: with both consumer warpgroups
# in the epilogue at once, the tensor cores still wait for it.
# Session 6, round 2: gelu in the epilogue as x * erfc(-x / sqrt 2) / 2 by one reciprocal, one exp2
# and a polynomial (cuda_lang's cvl_gelu) instead of 0.5 x (1 + erff(x / sqrt 2)) (erff: two polynomials
# whose coefficients are selected per element, 9 FSEL): 29 -> about 25 instructions an element of the
# epilogue (static SASS 4232 -> 3712). PREVIOUS_GELU_MODES render with the previous helper.
# Session 7: the epilogue's rounding round trip gone (a value rounded to f16 just before its store, as
# `cvl_f16(gelu(...))`, is stored from its unrounded form: the same bits, one conversion instead of
# three) and the gelu's 0.5 and log2(e) folded into its coefficients (2 FMUL fewer): static SASS 3712 ->
# 3072. Predicted 3-5 us (about 5 of 25 instructions an element of an epilogue that overlaps nothing).
# Measured (--rounds 10 --samples 50): median 241.1 us against 238.3 for session 6's epilogue, the
# rounds spread 231-248 for both: no measurable change (kept: fewer instructions, the same speed).
# SESSION6_MODES render with session 6's helper and the round trip.
# Session 8, probes (timing only, results wrong by design): the library default with half of each stage's B
# tile loaded (boxes 2 and 3 of the four 64-column boxes dropped, the barrier armed for 32 of 48 KiB): the
# L2-to-SM traffic a pair of CTAs sharing B by TMA multicast would have, without the cross-CTA handshake.
# If the GEMM waits on L2 bandwidth, this runs faster; if not, multicast is not worth building. Measured
# 204.8-220.3 us against 229.2-242.1 (-11%), yet multicast itself then gained nothing (cuda_wgmma.MULTICAST:
# 231.7-237.2 against 231.1-239.9): the probe's gain is most likely its half-constant B operand drawing
# less power under the H200's power cap, not its traffic. A probe that changes the data is no probe.
# Session 11, probes of the epilogue: how much of the default's time over cuBLAS alone (about 30 us in every
# session) the gelu takes, and how much the main loop itself. "no gelu": the bias added and the sum stored,
# no gelu (its MUFU exp and reciprocal and about 12 FMA an element gone); "main loop alone": the store kept
# behind a test no value passes, so ptxas drops the gelu and keeps only the bias's loads and the sum.
PROBES = {
    "probe: half of B loaded (a 2-CTA multicast's L2 traffic; wrong results)": lambda src: "\n".join(
        line.replace("cvl_mbar_expect_tx(bar, 49152u);", "cvl_mbar_expect_tx(bar, 32768u);")
        for line in src.splitlines() if not ("tma_b" in line and ("+ 16384u, tma_b" in line or "+ 24576u, tma_b" in line))),
    "probe: no gelu (bias added and stored; wrong results)": lambda src: src.replace("cvl_gelu(t", "(t"),
    "probe: main loop alone (no store passes its test; wrong results)": lambda src: "\n".join(
        line.replace("*reinterpret_cast<__half2*>(&b3[", "if (t3 == -1234.5f && t6 == 1234.5f) "
                     "*reinterpret_cast<__half2*>(&b3[", 1) for line in src.splitlines()),
}
# Session 9 (`2026-11-30-h200-ab_wgmma-session9-pingpong.md`, --rounds 8): two consumer warpgroups taking
# turns, a whole 64 x 256 tile each (cuda_wgmma.PINGPONG at commit 17c96a1: the producer loads the CTA's
# k steps in order, a consumer starts a tile's main loop once the other has issued its last wgmma of the
# tile before), so one's epilogue runs under the other's main loop. Predicted 3-8% faster than the
# default (its epilogue, when the tensor cores idle, is about a tenth of the time) unless the 1.67x more
# B traffic from L2 (B loaded for every 64 rows instead of 128) or the power cap took it back. Measured
# (correct, ragged sizes too): 291.7-311.7 us against 230.0-242.7 for the default and 228.9-244.1 for
# the warp-specialised kernel in the same rounds: 27% slower. One warpgroup's m64n256 wgmma stream with
# a group in flight does not keep the tensor cores as busy as two warpgroups on one 128-row tile. More
# groups in flight made it worse (`-session9-pingpong-2.md`, 6 rounds: s5p2 298.2-312.4, s4p2 322.9-327.5,
# s5p3 343.7-353.8 against 217.1-247.1): with 64-row tiles the kernel waits on B's loads. Removed.
# Session 11 (`2026-11-30-h200-ab_wgmma-session11-pingpong128.md`, --rounds 6): the same with a 128 x 128
# tile a warpgroup (commit af42cb7: WgmmaEngine row_sets 2, two m64n128k16 a 16-deep slice, 6 stages of
# 32 KiB, 168 registers), whose B is read for 128 rows as in the default. Correct (ragged, grid 5);
# 285.1-299.1 us against 233.6-244.3 for the default (cuBLAS alone 185.4-210.2): 22% slower. So the
# B traffic was not all of it: one warpgroup issuing a tile's wgmma alone keeps the tensor cores less
# busy than two sharing one. Removed.
# Session 8: CTA pairs along M sharing B by TMA multicast (cuda_wgmma.MULTICAST, per mode below; the
# probe's patch expects one CTA's four B boxes, so it renders unpaired).
MULTICAST_OF = {
    "library plain kernel, B multicast to CTA pairs": True,
    "library warp-specialised persistent 128x256 s4p1, TMA": False,
    "library warp-specialised persistent 128x256 s4p1, TMA, B multicast to CTA pairs": "ws",
    **{label: False for label in PROBES},
}
# Session 12: the plain kernel's output staged in shared memory and stored in 16-byte chunks
# (cuda_wgmma.STAGED_STORES, the default): predicted 2-5 us (the paired 4-byte stores cost 8 L1 transactions
# and half-filled sectors for every 128 bytes, in an epilogue the tensor cores idle through). The mode below
# is the previous epilogue; the probes patch the paired stores, so they render without staging.
PREVIOUS_STORES = "library plain kernel, paired 4-byte stores (previous, no staging)"
# Measured (`2026-11-30-h200-ab_wgmma-session12-staged.md`, 6 rounds): 4096^3 225.2-233.7 us against 229.8-239.1
# for the paired stores, faster in 6 of 7 passes. Then the staged boxes written by TMA instead (one thread's
# cp.async.bulk.tensor stores from 64 x 64 boxes in the 128-byte swizzle, 254 registers; `-tma-store.md`):
# correct on every size, 224.2-234.6 against 218.4-229.2 for the 16-byte copy-out and 223.7-237.7 for the
# paired stores in the same rounds: between the two, not kept (the code is at commit cb5bc08).
STAGED_OF = {PREVIOUS_STORES: False, **{label: False for label in PROBES}}
# Session 14: split-K for GEMMs whose tiles leave half the SMs idle (cuda_wgmma.SPLIT_K) and when the large tile
# takes over (LARGE_WAVES, LARGE_SPLIT_MAX): cuda_wgmma's settings per mode. First call
# (`2026-11-30-h200-ab_wgmma-session14-split.md`): split-K on 128 x 128 tiles 1024 x 1024 x 8192 44.0-46.0 us
# against 61.9-62.5 unsplit, 512 x 1024 x 8192 30.4-30.9 against 59.1-59.6; 128 x 256 from 0.9 waves 2048 x 2048
# x 8192 104.6-106.3 against 114.4-129.1 (from 2), 2048 x 2048 x 4096 56.4-58.6 against 67.5-68.2, 2048 x 4096 x
# 4096 115.0-117.2 against 134.4-135.7. Second call (`-split-2.md`, 4 rounds): see cuda_wgmma.LARGE_WAVES and
# SPLIT_K (split-K on 128 x 128 tiles two CTAs a multiprocessor was measured there and removed).
NO_SPLIT = "library plain kernel, no split-K (one CTA a tile)"
LARGE_FROM_TWO_WAVES = "library plain kernel, 128x256 from 2 waves, split-K on 128x128 only (before session 14)"
SPLIT_128_ONLY = "library plain kernel, split-K on 128x128 tiles only"
SETTINGS_OF = {NO_SPLIT: {"SPLIT_K": False}, LARGE_FROM_TWO_WAVES: {"LARGE_WAVES": 2.0, "LARGE_SPLIT_MAX": 1},
               SPLIT_128_ONLY: {"LARGE_SPLIT_MAX": 1}}
# Session 14, probes of split-K's meeting point (kernels that split only; wrong results): the last CTA's
# reads of the partials gone, and the partials' stores too.
_NO_READS = (re.compile(r"for \(int p = 0; p < \d+; \+\+p\)"), "for (int p = 0; p < 0; ++p)")
SPLIT_PROBES = {
    "probe: split-K, no reads of the partials (wrong results)": lambda src: _NO_READS[0].sub(_NO_READS[1], src),
    "probe: split-K, no partials stored or read (wrong results)": lambda src: "\n".join(
        line.replace("__stcg(mine + ", "if (acc[4 * i] == -1234.5f) __stcg(mine + ")  # kept: the wgmma stay live
        for line in _NO_READS[0].sub(_NO_READS[1], src).splitlines()),
}
PROBES.update(SPLIT_PROBES)
# Session 14: the tile's parts as one cluster, meeting in distributed shared memory (cuda_wgmma.SPLIT_CLUSTER,
# the default), against the workspace with a ticket and the last CTA summing alone.
SPLIT_WORKSPACE = "library plain kernel, split-K through the workspace (the last CTA sums)"
SETTINGS_OF[SPLIT_WORKSPACE] = {"SPLIT_CLUSTER": False}
# Measured (`-split-probes.md`, 4 rounds): the reads cost 8.2 us at 1024 x 1024 x 8192 (43.3 against 35.1), 2.7 at 512 x
# 1024 x 8192, 3.6 at 1024 x 2048 x 8192; the stores 3.1, 1.7 and 3.4 more. The last CTA's own part taken from its
# registers instead of read back: 44.3, 30.7, 63.4 against 43.3, 30.5, 62.9: no gain, not kept.
# Those probes overstate: with no reads the accumulators are constant zeros and ptxas folds the epilogue's
# arithmetic. The parts read through the free stages by cp.async (two half parts in flight, commit c9ac6de):
# 42.0 / 30.7 / 63.4 us against 41.8 / 30.8 / 63.5 for the register loads (`-split-staged.md`): the same, not kept.
# Session 15: the plain kernel's tiles walked in groups of G row tiles (cuda_wgmma.RASTER_ROWS, 16 the default
# now) instead of row-major, so a wave of CTAs streams fewer A and B panels from DRAM. Measured (3 rounds,
# `-session15-raster.md`), row-major against groups of 4 / 8 / 16: 8192^3 1833.8 us against 1792.8 / 1738.2 /
# 1717.2; 4096^3 239.3 against 233.0 / 226.0 / 228.7; 4096 x 8192 x 4096 485.7 against 479.8 / 464.9 / 456.2.
SETTINGS_OF["library plain kernel, tiles row-major (before session 15)"] = {"RASTER_ROWS": 0}
# Session 19: 128 x 192 tiles where 128 x 256 ones end in a thin last wave (cuda_wgmma.NARROW_TILE, the default), against
# 128 x 256 always; the mode "128x192 s4p1 tiles" below takes 128 x 192 at every size. Measured (4 rounds,
# `2026-12-01-h200-ab_wgmma-session19-narrow.md`), 128 x 256 against 128 x 192 (s4p1; s5p1 was no faster: 3072^3
# 102.2-111.0 us, 1536 x 4096 x 4096 92.2-93.9): 3072^3 126.6 against 102.4; 1536 x 4096 x 4096 107.6 against 91.4;
# 2560 x 4096 x 4096 165.7 against 174.2; 4096^3 227.1 against 271.7.
SETTINGS_OF["library plain kernel, 128x256 always (before session 19)"] = {"NARROW_TILE": None}
SETTINGS_OF["library plain kernel, tiles in groups of 8 row tiles"] = {"RASTER_ROWS": 8}
# Session 36 (not yet measured): each step's barrier and the refill of step s + 2 before the wait for step s's tile
# (cuda_wgmma.REFILL_FIRST), so a late tile no longer delays the next refill. Session 8's probe (half of B loaded,
# -11%) says the loads hold the loop back; the multicast that halved B's L2 traffic gained nothing, which points at
# their latency rather than the bytes: predicted 0-3% at 4096^3 if so, nothing if not.
SETTINGS_OF["library plain kernel, refilled before the wait"] = {"REFILL_FIRST": True}
# Session 15: split-K in 4 or more (even) parts as clusters of two whose half-tile sums meet through the workspace
# (cuda_wgmma.SPLIT_CLUSTER_GROUPS, the default), against the workspace alone (the last CTA sums every part).
SETTINGS_OF["library plain kernel, split-K of 4+ parts through the workspace alone (before session 15)"] = {
    "SPLIT_CLUSTER_GROUPS": False}
# Session 17, the split kernels' meeting in clusters (the code is at commit b626532; `2026-12-01-h200-ab_wgmma-session17-
# split{,-2}.md`, 4-5 rounds, medians of rounds). Each thread loading every chunk's sums before storing any (the
# SASS had each chunk's DSMEM loads behind the previous chunk's store): 1024 x 1024 x 8192 43.5 us against 39.8 for
# the session-16 code; its timeline showed the 64 KB of peer reads alone taking 4.6 us (about 14 GB/s a
# multiprocessor), which the interleaved order had hidden under the gelu. A CTA's own part read by ld.shared
# instead of through the cluster's window, and thread 0's fence.acq_rel.gpu around the ticket instead of every
# thread's __threadfence: 40.1 (with chunks interleaved) against 39.8; 512 x 1024 x 8192 30.6 against 30.7;
# 256 x 512 x 8192 20.3 against 20.7; 1024 x 2048 x 8192 61.3 against 60.4. Level: none kept.
# Session 18: a cluster's parts meet through the workspace from the accumulators (cuda_wgmma.SPLIT_EXCHANGE "l2",
# the default) against the shared-memory meeting of sessions 14-17 ("dsmem"): the timeline had the 64 KB read from
# the peer's shared memory at about 14 GB/s a multiprocessor, the L2 about 75. Measured (5 rounds,
# `-session18-split-l2.md`), medians of rounds: 1024 x 1024 x 8192 39.2 us against 40.2; 1024 x 2048 x 8192 58.3 against
# 59.6; 512 x 1024 x 8192 29.7 against 30.8; 256 x 512 x 8192 19.6 against 21.0. Kept.
# Session 18, measured and removed (commit 866a307, `-session18-dsmem-share.md`): a pair pushing 0.25 / 0.5 / all of each
# slice into the peer's shared memory beside the workspace: 1024 x 1024 x 8192 38.2 / 38.5 / 38.0 us against 38.8; level
# at the other sizes.
# Session 18, measured and removed (commit b0107e8, `-session18-skew.md`): the last cluster of a tile taking 2 / 3 / 5 k
# steps more than an even share (the others fewer), so that the others' meeting ran under its main loop: 1024 x 1024 x
# 8192 39.3 / 39.5 / 40.3 us against 39.05 even; 512 x 1024 x 8192 30.35 / 30.6 / 31.35 against 29.65.
SPLIT_DSMEM = "library plain kernel, split-K clusters meeting in distributed shared memory (before session 18)"
SETTINGS_OF[SPLIT_DSMEM] = {"SPLIT_EXCHANGE": "dsmem"}
# Session 16: the timeline (the kernel's work unchanged): thread 0 of each CTA notes %globaltimer at its start,
# at the end of its main loop, after its cluster's partials met (split-K in clusters), at its ticket (split-K
# through the workspace) and at its exit, with its SM, into the module's `cvl_tl_notes`; `timeline_summary`
# reads the last timed launch's notes. For the GEMMs whose time over cuBLAS is not yet explained (1024 x 1024
# x 8192: 39.8 us against PyTorch's 35.3): where do the 40 us go? Not yet run.
TIMELINE = "probe: timeline (%globaltimer at the phases; results unchanged)"
TIMELINE_HELPERS = r"""
__device__ unsigned long long cvl_tl_notes[8192 * 8];  // ablation: the timeline, 8 a CTA
__device__ __forceinline__ unsigned long long cvl_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    return t;
}
#define CVL_NOTE(i) do { if (threadIdx.x == 0) cvl_tl[i] = cvl_now(); } while (0)
#define CVL_FLUSH() do { if (threadIdx.x == 0) { unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm)); \
    cvl_tl[6] = sm; cvl_tl[7] = 1; for (int i = 0; i < 8; ++i) cvl_tl_notes[blockIdx.x * 8 + i] = cvl_tl[i]; } } while (0)
"""
_LOOP_DONE = ("__syncthreads();  // every warpgroup is past its last wgmma", "{  // split-K: this part's partial tile")
_TICKET = re.compile(r"^(\s*)if \(cvl_ticket != (\d+)u\) return;(.*)$")


def timeline_patch(src: str) -> str:
    """``src`` with the timeline's notes (TIMELINE): 0 start, 1 main loop done, 2 the cluster's partials met,
    3 ticket taken, 4 exit; 6 the SM, 7 set (a CTA that noted)."""
    out, loop_done = [], False
    lines = src.splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip() == "}")
    for i, line in enumerate(lines):
        if line.startswith('extern "C" __global__'):
            out.append(TIMELINE_HELPERS)
        ticket = _TICKET.match(line)
        if line.strip().startswith("extern __shared__"):
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}__shared__ unsigned long long cvl_tl[8];",
                    f"{indent}if (threadIdx.x == 0) for (int i = 0; i < 8; ++i) cvl_tl[i] = 0;", f"{indent}CVL_NOTE(0);"]
        elif not loop_done and line.strip().startswith(_LOOP_DONE):
            out.append(line[: len(line) - len(line.lstrip())] + "CVL_NOTE(1);")
            loop_done = True
        elif ticket:
            pad, count, rest = ticket.groups()
            out += [f"{pad}CVL_NOTE(3);", f"{pad}if (cvl_ticket != {count}u) {{ CVL_FLUSH(); return; }}{rest}"]
            continue
        elif i == last:
            out += ["    CVL_NOTE(4);", "    CVL_FLUSH();"]
        out.append(line)
        if "cvl_split_sync();  // every part of the cluster is in its CTA's shared memory" in line or (
                "cvl_split_sync();  // every CTA's parts of its peers' slices are in the workspace" in line):
            out.append(line[: len(line) - len(line.lstrip())] + "CVL_NOTE(2);")
    return "\n".join(out)


PROBES[TIMELINE] = timeline_patch


def timeline_summary(launch, label: str) -> str:
    """The last launch's timeline notes (TIMELINE), in microseconds from the first CTA's start: median [min, max]."""
    import cupy as cp
    import numpy as np

    module = launch.loaded.function.module
    ptr = module.get_global_var("cvl_tl_notes")
    mem = cp.cuda.UnownedMemory(ptr, 8192 * 8 * 8, module)
    notes = cp.asnumpy(cp.ndarray((8192, 8), cp.uint64, cp.cuda.MemoryPointer(mem, 0)))
    notes = notes[notes[:, 7] == 1].astype(np.int64)
    if not len(notes):
        return f"- {label}: no timeline notes"
    t0 = notes[:, 0].min()

    def at(col: int):
        v = notes[:, col]
        return (v[v > 0] - t0) / 1000.0

    def spread(v) -> str:
        return f"{np.median(v):.2f} [{v.min():.2f}, {v.max():.2f}]" if len(v) else "-"

    loop = at(1) - (notes[notes[:, 1] > 0, 0] - t0) / 1000.0
    parts = [f"{len(notes)} CTAs on {len(set(notes[:, 6]))} SMs", f"start {spread(at(0))}", f"main loop {spread(loop)}",
             f"loop ends {spread(at(1))}"]
    if (notes[:, 2] > 0).any():
        parts.append(f"partials met {spread(at(2))}")
    if (notes[:, 3] > 0).any():
        parts.append(f"ticket {spread(at(3))}")
    leaves = np.concatenate([at(3), at(4)])  # a CTA leaves at its ticket or after storing
    stored = notes[(notes[:, 4] > 0) & (notes[:, 1] > 0)]
    parts += [f"exit (CTAs that stored) {spread(at(4))}",
              f"exit after the loop's end, a CTA that stored {spread((stored[:, 4] - stored[:, 1]) / 1000.0)}",
              f"span {leaves.max() if len(leaves) else 0:.2f}"]
    gaps = []  # on each SM, from a CTA's exit to the start of the next CTA there (grids of more than one wave)
    for sm in set(notes[:, 6].tolist()):
        on = notes[(notes[:, 6] == sm) & (notes[:, 4] > 0)]
        on = on[np.argsort(on[:, 0])]
        gaps += ((on[1:, 0] - on[:-1, 4]) / 1000.0).tolist()
    if gaps:
        parts.append(f"an SM's next CTA starts after the last one's exit {spread(np.array(gaps))} ({len(gaps)} hand-overs)")
    return f"- {label}, timeline of the last timed launch (us from the first CTA's start): " + "; ".join(parts)


LIBRARY_MODES = [
    ("library default (128x256 s4p1, staged 16-byte stores, TMA loads)", True, (128, 256, 4, 1), False, True),
    *((label, True, (128, 256, 4, 1), False, True) for label in SETTINGS_OF),
    (PREVIOUS_STORES, True, (128, 256, 4, 1), False, True),
    ("library plain kernel, B multicast to CTA pairs", True, (128, 256, 4, 1), False, True),
    *((label, True, (128, 256, 4, 1), False, True) for label in PROBES),
    # Session 19: narrower large tiles, for launches whose 128 x 256 tiles end in a thin last wave (3072^3: 288
    # tiles, 2.18 waves, against 384 of 128 x 192, 2.91 waves).
    ("library plain kernel, 128x192 s4p1 tiles", True, (128, 192, 4, 1), False, True),
    ("library warp-specialised persistent 128x256 s4p1, TMA", True, (128, 256, 4, 1), True, True),
    ("library warp-specialised persistent 128x256 s4p1, TMA, B multicast to CTA pairs", True, (128, 256, 4, 1), True,
     True),
]
# Session 23: the warp-specialised kernel's barrier wait traps through a __noinline__ function (cuda_wgmma.
# WS_TRAP_OUTLINED, as the attention kernel's since session 22), so its consumers get the registers setmaxnreg gives
# them (R193 at 4096^3, against R159 capped at the entry count with the trap inlined; no spills either way).
WS_INLINED_TRAP = "library warp-specialised persistent 128x256 s4p1, TMA, trap inlined (before session 23)"
LIBRARY_MODES.append((WS_INLINED_TRAP, True, (128, 256, 4, 1), True, True))
SETTINGS_OF[WS_INLINED_TRAP] = {"WS_TRAP_OUTLINED": False}  # (after LIBRARY_MODES: not a plain-kernel mode)
# (Session 23, measured and dropped, commit 804a07e: "library plain kernel, uniform warpgroup index", the wgmma
# descriptors in uniform registers: 223.7 us against 220.2 for the default, slower in all 6 rounds.)
# (Measured and dropped from the list: the session-6 epilogue and the previous gelu (SESSION6_MODES,
# PREVIOUS_GELU_MODES), warp-specialised s4p0 and with cp.async; numbers in the comments above.)


def parse_configs(text: str) -> list[dict]:
    out = []
    for item in text.split(","):
        head, *flags = item.strip().split("-")
        m = _CFG.fullmatch(head)
        if not m:
            raise SystemExit(f"bad config {item!r}: expected BMxBNsSTAGESpPENDING[-rG][-pers][-ws][-h2], "
                             "e.g. 128x256s4p1")
        bm, bn, s, p = map(int, m.groups())
        c = dict(bm=bm, bn=bn, stages=s, pending=p, raster=0, persistent=False, pack=False, ws=False, probe="")
        for f in flags:
            if re.fullmatch(r"r\d+", f):
                c["raster"] = int(f[1:])
            elif f == "pers":
                c["persistent"] = True
            elif f == "h2":
                c["pack"] = True
            elif f == "ws":
                c["ws"] = True
            elif f in ("noload", "nomma"):
                c["probe"] = "mma" if f == "noload" else "loads"
            else:
                raise SystemExit(f"bad variant flag {f!r} in {item!r}: rG, pers, h2, ws, noload or nomma")
        out.append(c)
    return out


def cfg_name(c: dict) -> str:
    flags = ([f"r{c['raster']}"] if c.get("raster") else []) + (["pers"] if c.get("persistent") else []) \
        + (["ws"] if c.get("ws") else []) + (["h2"] if c.get("pack") else []) \
        + ([{"mma": "noload", "loads": "nomma"}[c["probe"]]] if c.get("probe") else [])
    return "-".join([f"{c['bm']}x{c['bn']}s{c['stages']}p{c['pending']}", *flags])


def timed(sizes, c: dict, configs: list[dict]) -> bool:
    """Every config is timed on the first (large) size; the smaller sizes time the baseline and
    the 128 x 128 tiles only (the variants aim at the large one; this keeps the script short)."""
    return sizes == TIMED[0] or c is configs[0] or (c["bm"], c["bn"]) == (128, 128)


def build_all(configs: list[dict], swap: bool, sass: bool) -> dict:
    """{(sizes, cfg name, b_k_major, swap): (StandaloneKernel, CompiledUnit)} compiled in one batch."""
    jobs = []
    for c in configs:
        for sizes in TIMED:
            if timed(sizes, c, configs):
                jobs.append((sizes, c, False))
    for c in configs:
        if not c["probe"]:
            jobs.append((RAGGED, c, False))
    for sizes, kmaj in CHECK_ONLY:
        if kmaj:
            jobs.append((sizes, configs[0], kmaj))
    kernels, units = [], []
    for i, (sizes, c, kmaj) in enumerate(jobs):
        k = gemm_bias_gelu_source(*sizes, b_k_major=kmaj, swap_mn_offsets=swap, **c)
        kernels.append(k)
        units.append(CompileUnit(f"ab_wgmma_{i}", k.source, (k.entry,)))
    t0 = time.perf_counter()
    built = compile_units(units, ARCH, fallback="none", workers=min(16, os.cpu_count() or 2))
    print(f"compiled {len(units)} kernels for {ARCH} in {time.perf_counter() - t0:.1f} s"
          f"{' (LBO/SBO swapped for MN-major operands)' if swap else ''}", flush=True)

    def hgmma(job_unit) -> str:
        (sizes, _c, _kmaj), u = job_unit
        if not sass or sizes != TIMED[0]:
            return "?"
        try:
            from cuvil_dsl.compile import count_instructions, disassemble

            return str(count_instructions(disassemble(u.cubin), "HGMMA"))
        except Exception as exc:  # a missing disassembler is not a failure of the kernel
            return f"n/a ({type(exc).__name__})"

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as pool:
        counts = list(pool.map(hgmma, zip(jobs, built)))
    out = {}
    for (sizes, c, kmaj), k, u, hg in zip(jobs, kernels, built, counts):
        r = u.resources[k.entry]
        print(f"  {sizes} {cfg_name(c)} b_k_major={kmaj}: {r.registers} regs, spills {r.spill_bytes} B, "
              f"stack {r.stack_bytes} B, smem {k.shared_bytes} B, HGMMA {hg}", flush=True)
        out[(sizes, cfg_name(c), kmaj, swap)] = (k, u)
    return out


PREVIOUS_GELU_MODES = {"library default, previous gelu (0.5 x (1 + erff))"}
PREVIOUS_GELU = ("__device__ __forceinline__ float cvl_gelu(float x) { return 0.5f * x * (1.0f + "
                 "erff(x * 0.7071067811865476f)); }\n")


SESSION6_MODES = {"library default, session-6 epilogue (f16 round trip, gelu unfolded)"}
SESSION6_GELU = """__device__ __forceinline__ float cvl_gelu(float x) {
    const float z = fabsf(x) * 0.7071067811865476f;
    float t, e;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.5f, z, 1.0f)));
    float p = fmaf(t, 0.17087277f, -0.82215223f);
    p = fmaf(t, p, 1.48851587f);
    p = fmaf(t, p, -1.13520398f);
    p = fmaf(t, p, 0.27886807f);
    p = fmaf(t, p, -0.18628806f);
    p = fmaf(t, p, 0.09678418f);
    p = fmaf(t, p, 0.37409196f);
    p = fmaf(t, p, 1.00002368f);
    p = fmaf(t, p, -1.26551223f);
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(-z, z, p) * 1.4426950408889634f));
    const float h = 0.5f * t * e;
    return x * (x > 0.0f ? 1.0f - h : h);
}
"""


def previous_gelu(prelude: str, helper: str = PREVIOUS_GELU) -> str:
    """The CUDA prelude with cvl_gelu(float) replaced by ``helper`` (before session 6 by default)."""
    start = prelude.index("// gelu(x) = x * Phi(x)")
    end = prelude.index("\n}\n", prelude.index("__device__ __forceinline__ float cvl_gelu(float x)")) + 3
    return prelude[:start] + helper + prelude[end:]


def build_library(modes=LIBRARY_MODES) -> dict:
    """{(sizes, label): (RenderedKernel, CompiledUnit)}: the library's gemm_gelu_f16 kernel under each
    mode's cuda_wgmma switches (restored after), for TIMED and RAGGED, compiled in one batch."""
    from cuvil_dsl.codegen import cuda_wgmma, render_cuda
    from cuvil_dsl.frontend import check_file
    from cuvil_dsl.passes import plan_pipeline
    from cuvil_dsl.spec.binding import bind, select_pipeline
    from cuvil_dsl.spec.loader import load_spec

    loaded = load_spec(LIBRARY_SPEC)
    checked = check_file(loaded.pipeline_path)
    assert checked.ok, [str(d) for d in checked.diagnostics]
    pipeline = select_pipeline(loaded, checked.module)
    binding = bind(loaded, pipeline)
    from cuvil_dsl.codegen import cuda as cuda_codegen

    saved = (cuda_wgmma.PAIRED_STORES, cuda_wgmma.LARGE_TILE, cuda_wgmma.LIBRARY_WS, cuda_wgmma.TMA, cuda_wgmma.MULTICAST,
             cuda_wgmma.STAGED_STORES)
    prelude, unrounded = cuda_codegen.PRELUDE, cuda_codegen.CudaKernel.unrounded
    settings = {name: getattr(cuda_wgmma, name) for mode in SETTINGS_OF.values() for name in mode}  # restored after
    jobs = []
    try:
        for label, pairs, tile, ws, tma in modes:
            cuda_codegen.PRELUDE = (previous_gelu(prelude) if label in PREVIOUS_GELU_MODES else
                                    previous_gelu(prelude, SESSION6_GELU) if label in SESSION6_MODES else prelude)
            cuda_codegen.CudaKernel.unrounded = ((lambda self, lines, expr, value: expr)
                                                 if label in PREVIOUS_GELU_MODES | SESSION6_MODES else unrounded)
            cuda_wgmma.PAIRED_STORES, cuda_wgmma.LARGE_TILE, cuda_wgmma.LIBRARY_WS = pairs, tile, ws
            cuda_wgmma.TMA, cuda_wgmma.MULTICAST = tma, MULTICAST_OF.get(label, saved[4])
            cuda_wgmma.STAGED_STORES = STAGED_OF.get(label, saved[5])
            for name, value in {**settings, **SETTINGS_OF.get(label, {})}.items():
                setattr(cuda_wgmma, name, value)
            plan, diags = plan_pipeline(pipeline, dict(loaded.spec.kernels), "sm_90")
            assert not [d for d in diags if d.is_error], diags
            for M, N, K in [*TIMED, *LIBRARY_CHECKS]:
                sizes = {**binding.sizes, "M": M, "N": N, "K": K}
                (k,) = render_cuda(plan, sizes, "sm_90")
                if ws and "setmaxnreg" not in k.source:
                    continue  # a launch too small for LARGE_TILE: the default's kernel
                if label in PROBES:
                    if (M, N, K) not in TIMED:
                        continue
                    patched = PROBES[label](k.source)
                    if patched == k.source and label in SPLIT_PROBES:
                        continue  # a kernel that does not split
                    assert patched != k.source, f"the probe's patch found nothing: {label}"
                    k = replace(k, source=patched)
                jobs.append(((M, N, K), label, k))
    finally:
        (cuda_wgmma.PAIRED_STORES, cuda_wgmma.LARGE_TILE, cuda_wgmma.LIBRARY_WS, cuda_wgmma.TMA,
         cuda_wgmma.MULTICAST, cuda_wgmma.STAGED_STORES) = saved
        cuda_codegen.PRELUDE, cuda_codegen.CudaKernel.unrounded = prelude, unrounded
        for name, value in settings.items():
            setattr(cuda_wgmma, name, value)
    units = [CompileUnit(f"ab_wgmma_lib_{i}", k.source, (k.entry,), k.options) for i, (_s, _l, k) in enumerate(jobs)]
    built = compile_units(units, "sm_90", fallback="none", workers=min(16, os.cpu_count() or 2))
    out = {}
    for (sizes, label, k), u in zip(jobs, built):
        r = u.resources[k.entry]
        print(f"  {sizes} {label}: {u.arch}, {k.block[0]} threads, grid {k.grid[0]}, {r.registers} regs, "
              f"spills {r.spill_bytes} B, smem {k.shared_bytes} B", flush=True)
        out[(sizes, label)] = (k, u)
    return out


def library_launch(k, u, a, b, bias, y):
    """Launch the library kernel ``k`` (its buffers by name: a, b, bias, y) the way the executor does:
    argument cells (TMA descriptors encoded from the buffers' pointers) and a prebuilt parameter array."""
    import cupy as cp

    from cuvil_dsl.runtime.device import max_dynamic_shared_bytes
    from cuvil_dsl.runtime.modules import ArgumentCells, load_kernels

    by_name = {"a": a, "b": b, "bias": bias, "y": y}
    cells = ArgumentCells()
    for arg in k.args:
        if arg.kind == "buffer":
            cells.set_pointer(arg.name, by_name[arg.name].data.ptr)
    loaded = load_kernels([k], [u], cells, max_dynamic_shared_bytes(cp.cuda.Device().id))[k.name]
    return _Launch(loaded)


class _Launch:
    """One launch of a loaded library kernel on the current stream (``loaded``: its module, for the timeline)."""

    def __init__(self, loaded):
        self.loaded = loaded

    def __call__(self) -> None:
        import cupy as cp

        self.loaded.launch(cp.cuda.get_current_stream().ptr)


class Bench:
    def __init__(self, samples: int):
        import cupy as cp

        self.cp = cp
        self.samples = samples
        self.timer = GpuTimer(CudaClock(), Settings(budget_s=0.02, min_samples=samples, max_samples=max(samples, 200)))
        self.tmp = tempfile.mkdtemp(prefix="ab_wgmma_")
        try:
            import torch  # noqa: F401

            self.torch = torch
        except Exception:
            self.torch = None

    def time(self, fn) -> float:
        """Median device time of ``fn`` (``bench.timing.GpuTimer``: L2 flushed and CUDA events
        around every sample, the queue kept full)."""
        fn()
        return self.timer.measure(fn, self.cp.cuda.get_current_stream()).median_us

    def load(self, k, u):
        cp = self.cp
        path = os.path.join(self.tmp, f"{u.unit.name}.cubin")
        with open(path, "wb") as f:
            f.write(u.cubin)
        fn = cp.RawModule(path=path).get_function(k.entry)
        fn.max_dynamic_shared_size_bytes = k.shared_bytes
        return fn

    def inputs(self, M, N, K, b_k_major=False):
        cp = self.cp
        rs = cp.random.RandomState(1234)
        a = (rs.standard_normal((M, K), dtype=cp.float32) * 0.05).astype(cp.float16)
        b = (rs.standard_normal((K, N), dtype=cp.float32) * 0.05).astype(cp.float16)
        bias = (rs.standard_normal((N,), dtype=cp.float32) * 0.1).astype(cp.float16)
        b_dev = cp.ascontiguousarray(b.T) if b_k_major else b
        return a, b, b_dev, bias

    def reference(self, a, b, bias):
        cp = self.cp
        from cupyx.scipy.special import erf

        x = a.astype(cp.float64) @ b.astype(cp.float64) + bias.astype(cp.float64)
        return 0.5 * x * (1.0 + erf(x / 2**0.5))

    def check(self, y, ref) -> tuple[bool, float, float]:
        cp = self.cp
        yd = y.astype(cp.float64)
        err = cp.abs(yd - ref)
        ratio = float(cp.max(err / (ATOL + RTOL * cp.abs(ref))))
        finite = bool(cp.all(cp.isfinite(yd)))
        return finite and ratio <= 1.0, float(cp.max(err)), ratio


def main() -> int:
    faulthandler.dump_traceback_later(58, exit=True)  # a hung kernel must not outlive the session
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--no-sass", action="store_true", help="skip the cuobjdump HGMMA count")
    ap.add_argument("--no-library", action="store_true", help="skip the library's gemm_gelu_f16 kernels")
    ap.add_argument("--library-modes", default="",
                    help="comma-separated parts of LIBRARY_MODES labels: build only the modes whose label has one "
                         "(the first mode, the default, always)")
    ap.add_argument("--timed", default="", metavar="MxNxK,...",
                    help="time these sizes instead of TIMED (the first is also where the SASS is read); session 11 "
                         "timed multicast at five sizes this way: level or slightly slower at each")
    ap.add_argument("--rounds", type=int, default=0,
                    help="after everything, time the library's correct kernels and cuBLAS at each timed size "
                         "this many more times, round-robin, each round starting one kernel later (order and clock "
                         "drift cancel out)")
    args = ap.parse_args()
    if args.timed:
        global TIMED
        TIMED = [tuple(int(v) for v in size.split("x")) for size in args.timed.split(",")]
        if any(len(size) != 3 for size in TIMED):
            raise SystemExit(f"--timed {args.timed!r}: sizes are MxNxK, comma-separated")
    configs = parse_configs(args.configs)
    started = time.perf_counter()
    built = build_all(configs, swap=False, sass=not args.no_sass)
    wanted = [part.strip() for part in args.library_modes.split(",") if part.strip()]
    modes = [m for i, m in enumerate(LIBRARY_MODES) if i == 0 or not wanted or any(part in m[0] for part in wanted)]
    library = {} if args.no_library else build_library(modes)

    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        props = cp.cuda.runtime.getDeviceProperties(0)
        device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        sm_count = int(props["multiProcessorCount"])
        if (props["major"], props["minor"]) != (9, 0):
            raise RuntimeError(f"{device} is compute capability {props['major']}.{props['minor']}; sm_90a needs 9.0")
    except Exception as exc:
        print(f"ab_wgmma: cannot run on a GPU: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    failed = False
    need_swap = False  # set when only the swapped LBO/SBO encoding passed
    bench = Bench(args.samples)
    print(f"device: {device} ({sm_count} SMs); torch: {'yes' if bench.torch is not None else 'no'}", flush=True)

    def table() -> str:
        head = ["| M x N x K | implementation | us | TFLOP/s | vs torch | check (max abs err, max err/tol) |",
                "|---|---|---|---|---|---|"]
        return (f"# ab_wgmma on {device}\n\ngelu(a @ b + bias), f16, rtol = atol = {RTOL}; median of "
                f"{args.samples} samples, L2 flushed before each\n\n" + "\n".join(head + rows) + "\n"
                + ("\n" + "\n".join(notes) + "\n" if notes else ""))

    def save(text: str) -> None:
        out = os.environ.get("OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            Path(out, "ab_wgmma.md").write_text(text)

    def emit():
        text = table()
        print("\n" + text, flush=True)
        save(text)

    class Rows(list):
        """Each row is printed and the table so far saved as it comes (a hang still leaves them)."""

        def append(self, row: str) -> None:
            super().append(row)
            print(row, flush=True)
            save(table())

    rows = Rows()

    def run_checks(checks) -> None:
        nonlocal failed
        for (M, N, K), c, kmaj in checks:
            a, b, b_dev, bias = bench.inputs(M, N, K, kmaj)
            ref = bench.reference(a, b, bias)
            key = ((M, N, K), cfg_name(c), kmaj, need_swap)
            if key not in built:
                built.update(build_all([c], swap=need_swap, sass=False))
            k, u = built[key]
            fn = bench.load(k, u)
            what = "b stored [N, K] (K-major, trans-b 0)" if kmaj else "ragged edges (zero-fill)"
            grids = [k.grid_for(sm_count)] + ([(5, 1, 1)] if k.persistent else [])
            for grid in grids:
                y = cp.full((M, N), float("nan"), dtype=cp.float16)
                fn(grid, k.block, (a, b_dev, bias, y), shared_mem=k.shared_bytes)
                cp.cuda.runtime.deviceSynchronize()
                ok, err, rel = bench.check(y, ref)
                failed |= not ok
                rows.append(f"| {M} x {N} x {K} | wgmma {cfg_name(c)}, {what}, grid {grid[0]} | | | | "
                            f"{'ok' if ok else 'FAIL'} ({err:.2g}, {rel:.2g}) |")

    def run_library(sizes, specialised: bool) -> None:
        """The library's kernels at ``sizes`` (the warp-specialised ones or the others): checked against
        float64, timed when ``sizes`` is in TIMED."""
        nonlocal failed
        M, N, K = sizes
        modes = [label for label, _p, _t, ws, _tma in LIBRARY_MODES if (sizes, label) in library and ws == specialised]
        if not modes:
            return
        a, b, _, bias = bench.inputs(M, N, K)
        ref = bench.reference(a, b, bias)
        flop = 2.0 * M * N * K
        for label in modes:
            k, u = library[(sizes, label)]
            y = cp.full((M, N), float("nan"), dtype=cp.float16)
            launch = library_launch(k, u, a, b, bias, y)
            launch()
            cp.cuda.runtime.deviceSynchronize()
            ok, err, rel = bench.check(y, ref)
            if label in PROBES:  # wrong by design: timed, never a failure
                ok, cell = True, "probe (not checked)"
            else:
                failed |= not ok
                cell = f"{'ok' if ok else 'FAIL'} ({err:.2g}, {rel:.2g})"
            regs = u.resources[k.entry].registers
            what = (f"{label} ({k.block[0]} threads, {regs} regs, {k.shared_bytes // 1024} KiB)")
            if not ok or sizes not in TIMED:
                rows.append(f"| {M} x {N} x {K} | {what} | | | | {cell} |")
                continue
            us = bench.time(launch)
            rows.append(f"| {M} x {N} x {K} | {what} | {us:.1f} | {flop / us / 1e6:.0f} | | {cell} |")
            if label == TIMELINE:
                try:
                    notes.append(timeline_summary(launch, f"{M} x {N} x {K}, events {us:.1f} us"))
                except Exception as exc:  # reading the notes back must not end the run
                    notes.append(f"- {M} x {N} x {K}: timeline notes unreadable: {type(exc).__name__}: {exc}")
                print(notes[-1], flush=True)
            rounds.setdefault(sizes, [("cupy.matmul (cuBLAS, no epilogue)", lambda a=a, b=b: cp.matmul(a, b))])
            rounds[sizes].append((label, launch))
        del a, b, bias, ref

    rounds: dict = {}  # timed size -> [(label, launch)] of the kernels that passed, for --rounds
    notes: list[str] = []  # the timeline probe's summaries, after the table

    try:
        for sizes in [*LIBRARY_CHECKS, *TIMED]:
            run_library(sizes, False)
        # checks first, of everything but the warp-specialised kernels (those, like their timings, last:
        # a barrier that never completes traps, and a CUDA error ends the run)
        run_checks([(RAGGED, c, False) for c in configs if not c["probe"] and not c["ws"]]
                   + [(sizes, configs[0], True) for sizes, kmaj in CHECK_ONLY if kmaj])
        for M, N, K in reversed(TIMED):  # the small size first: the risky variants come last of all
            flop = 2.0 * M * N * K
            a, b, _, bias = bench.inputs(M, N, K)
            ref = bench.reference(a, b, bias)
            label = f"{M} x {N} x {K}"
            base = None
            if bench.torch is not None:
                torch = bench.torch
                ta, tb, tbias = (torch.from_dlpack(x) for x in (a, b, bias))
                us = bench.time(lambda: torch.nn.functional.gelu(ta @ tb + tbias))
                base = us
                rows.append(f"| {label} | torch matmul + bias + gelu | {us:.1f} | {flop / us / 1e6:.0f} | 1.00 | |")
            us = bench.time(lambda: cp.matmul(a, b))
            ratio = f"{base / us:.2f}" if base else ""
            rows.append(f"| {label} | cupy.matmul (cuBLAS, no epilogue) | {us:.1f} | {flop / us / 1e6:.0f} "
                        f"| {ratio} | |")
            for c in configs:
                if not timed((M, N, K), c, configs):
                    continue
                name = cfg_name(c)
                k, u = built[((M, N, K), name, False, False)]
                y = cp.empty((M, N), dtype=cp.float16)
                if c["probe"]:  # a timing probe: its results are wrong by design
                    fn = bench.load(k, u)
                    us = bench.time(lambda fn=fn, k=k: fn(k.grid_for(sm_count), k.block, (a, b, bias, y),
                                                          shared_mem=k.shared_bytes))
                    rows.append(f"| {label} | probe {name} ({k.block[0]} threads) | {us:.1f} | | | not checked |")
                    continue
                ok, err, rel = False, float("nan"), float("nan")
                variant = "LBO=MN atom stride"
                for swap in ((False, True) if c is configs[0] else (False,)):  # the encoding question: baseline only
                    if swap:
                        key = ((M, N, K), name, False, True)
                        if key not in built:
                            built.update(build_all([c], swap=True, sass=False))
                        k, u = built[key]
                        variant = "LBO/SBO swapped"
                    fn = bench.load(k, u)
                    y.fill(float("nan"))
                    launch = (lambda fn=fn, k=k: fn(k.grid_for(sm_count), k.block, (a, b, bias, y),
                                                    shared_mem=k.shared_bytes))
                    launch()
                    cp.cuda.runtime.deviceSynchronize()
                    ok, err, rel = bench.check(y, ref)
                    print(f"{label} wgmma {name} [{variant}]: check {'ok' if ok else 'FAILED'} "
                          f"max abs err {err:.3g}, max err/tol {rel:.3g}", flush=True)
                    if ok:
                        need_swap |= swap
                        break
                cell = f"{'ok' if ok else 'FAIL'} ({err:.2g}, {rel:.2g}) {variant}"
                if not ok:
                    failed = True
                    rows.append(f"| {label} | wgmma {name} | | | | {cell} |")
                    continue
                us = bench.time(launch)
                ratio = f"{base / us:.2f}" if base else ""
                regs = u.resources[k.entry].registers
                rows.append(f"| {label} | wgmma {name} (gelu fused, {k.block[0]} threads, {regs} regs, "
                            f"{k.shared_bytes // 1024} KiB) | {us:.1f} | {flop / us / 1e6:.0f} "
                            f"| {ratio} | {cell} |")
            del a, b, bias, ref
        run_checks([(RAGGED, c, False) for c in configs if not c["probe"] and c["ws"]])
        for sizes in [*LIBRARY_CHECKS, *TIMED]:
            run_library(sizes, True)
        for r in range(args.rounds):
            for (M, N, K), runs in rounds.items():
                shift = r % len(runs)  # each round starts one kernel later: a kernel's place in the round (the
                for label, launch in runs[shift:] + runs[:shift]:  # clock after the one before) moves round by round
                    us = bench.time(launch)
                    rows.append(f"| {M} x {N} x {K} | round {r + 1}: {label} | {us:.1f} | "
                                f"{2.0 * M * N * K / us / 1e6:.0f} | | |")
    except Exception as exc:  # a CUDA error (illegal address, launch failure): report it, keep the rows so far
        print(f"ab_wgmma: CUDA failure: {type(exc).__name__}: {exc}", file=sys.stderr)
        rows.append(f"| | **aborted: {type(exc).__name__}: {str(exc)[:160]}** | | | | |")
        failed = True
        emit()
        os._exit(1)  # the context may be unusable; skip teardown
    emit()
    print(f"total {time.perf_counter() - started:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
