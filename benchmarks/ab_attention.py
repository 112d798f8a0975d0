#!/usr/bin/env python3
"""A/B of the two GEMM + softmax templates on the GPU: the row band (``cuda_matmul.ROW_BAND``,
the default for 16-bit operands with K <= 128) against the generic template it replaced.

For each case the pipeline is loaded and bound as ``cuvil-dsl run`` does, planned, rendered with
the switch on and off, compiled (NVRTC, the compile service) and launched in plan order as the
executor launches (argument cells, prebuilt parameter arrays) on fresh random inputs; results are
checked against the float64 reference (``cuvil_dsl.reference.execute``; for batches over 4, the first 2
batch entries) within the spec's tolerances, then the GEMM + softmax kernels are timed as ``cuvil-dsl
bench`` times (``bench.timing.GpuTimer``: warm-up, L2 flushed and CUDA events around every sample, the
queue kept full), the median of at least ``--samples`` (>= 50), and checked again after the timed
launches (the outputs poisoned anew: a kernel that leaves state behind for its next launch fails).

    python3 benchmarks/ab_attention.py [--samples 100]   # writes $OUT/ab_attention.md when OUT is set
    python3 benchmarks/ab_attention.py --no-variants --only "exit barrier"   # some CHECKED_VARIANTS, the default twice
    python3 benchmarks/ab_attention.py --no-variants --only none --ablations   # the ablations and the timeline
    python3 benchmarks/ab_attention.py --no-variants --only none --ablations --ablation "launch alone"   # some of them
    python3 benchmarks/ab_attention.py --no-variants --only none --batches 8,16,32,64   # time against the batch

Exit status: 0 when every case matches its reference with both templates, 1 when one does not,
2 when there is no GPU (nothing is run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings  # noqa: E402

ODD_BF16 = """# a bf16 case of odd sizes: M and N not multiples of any tile, K = 40 padded to 48
pipeline attn_bf16_odd(q: bf16[B, M, D], k: bf16[B, N, D]) -> p: bf16[B, M, N] {
    kernel scores {
        p = softmax(q @ k.T * 0.125, axis=-1)
    }
}
"""
ODD_BF16_SPEC = """pipeline: attn_bf16_odd.cuvil
shapes: {B: 8, M: 1000, N: 1000, D: 40}
check: {rtol: 1.6e-2, atol: 1.6e-2}
"""


# Row-band variants timed on the first case (attention_f16) next to the default and the generic
# template: (label, cuda_matmul.ROW_BAND_TUNING). See ROW_BAND_TUNING for the keys. Earlier variants
# and their times are in benchmarks/NOTES.md (attention_f16). Predictions (default 145.8 in bench,
# 148.6 here) and sm_90 resources (ptxas, CPU) written before the GPU run of 2026-11-29, session 3:
VARIANTS = [
    # exps on the FMA pipe: each moved exp is ~10 more issued instructions for 8 MUFU cycles saved;
    # at 1184 SASS instructions a step pair the kernel is about as issue bound (74 us at full issue)
    # as MUFU bound (68 us), so predicted no gain: (1, 1) 140-150, (2, 0) 142-152, (4, 0) 150-165
    # (1504 instructions a step pair). 128 regs, 0 spills, 46 KB smem.
    ("poly exp2 1/8 of both passes", {"poly": (1, 1)}),
    ("poly exp2 1/4 of statistics", {"poly": (2, 0)}),
    ("poly exp2 1/2 of statistics", {"poly": (4, 0)}),
    # 128-column tiles (half the barriers and per-tile row updates), 16-row warps (64 accumulators):
    # 992-1008 SASS instructions a step pair against 1184, 16 warps/SM as now, 126 regs, 0 spills;
    # 53 KB (4/SM) and 106 KB (2/SM) smem. Predicted 125-140.
    ("16-row warps, 128-col tiles, blocks of 128, 4/SM", {"tile": (64, 128, 128), "min_blocks": 4}),
    ("16-row warps, 128-col tiles, blocks of 256, 2/SM", {"tile": (128, 128, 256), "min_blocks": 2}),
    # 64-row warps: a B fragment serves 4 m16 tiles (half the ldmatrix per element of 32-row warps),
    # but 32-column tiles (64 accumulators; 64 regs hold the A band): 201 regs, 0 spills, only 8
    # warps/SM, 1568-1584 instructions a step pair. Predicted 160-180 (worse). 36 KB smem.
    ("64-row warps, 32-col tiles, blocks of 64, 4/SM", {"tile": (128, 32, 64), "min_blocks": 4}),
    # software pipelining across column tiles ("overlap"): the next tile's mma issued before this
    # tile's exps and stores, so the tensor pipe (about 52 us of mma.sync for both passes) runs under
    # the MUFU/FMA work instead of between it; needs two accumulator sets, so 16-row warps with 64
    # columns (124 regs, 0 spills, 45 KB smem) or 32-row warps with 32 columns (128 regs, 36 KB).
    # Per element about the default's instruction count (1152 a pair of 16 x 64 step pairs), but the
    # 16-row warps' twice the ldmatrix per element that made them 171 us unpipelined. Predicted
    # 120-150 for the 16-row ones, 125-150 for 32x32, 130-150 for 32x64 at 2/SM (239 regs, 8
    # warps/SM); with poly a few us either way.
    ("overlap, 16-row warps, blocks of 128, 4/SM", {"overlap": True, "tile": (64, 64, 128), "min_blocks": 4}),
    ("overlap, 16-row warps, blocks of 256, 2/SM", {"overlap": True, "tile": (128, 64, 256), "min_blocks": 2}),
    ("overlap, 32-row warps, 32-col tiles, 4/SM", {"overlap": True, "tile": (128, 32, 128), "min_blocks": 4}),
    ("overlap, 32-row warps, 64-col tiles, 2/SM", {"overlap": True, "tile": (128, 64, 128), "min_blocks": 2}),
    ("overlap 16-row 4/SM + poly 1/8 both passes",
     {"overlap": True, "tile": (64, 64, 128), "min_blocks": 4, "poly": (1, 1)}),
    ("overlap 16-row 4/SM + poly 1/4 of statistics",
     {"overlap": True, "tile": (64, 64, 128), "min_blocks": 4, "poly": (2, 0)}),
    # stmatrix.x4 staging of the output tile: 8 stores a write step instead of 32 (1168 instructions
    # a step pair against 1184). Predicted 0-3 us less. 128 regs, 0 spills.
    ("stmatrix staging", {"stsm": True}),
    # measured 2026-11-30 (all cases, see NOTES): every exp on the FMA pipe 232.9 us; overlapped
    # 16-row loop with stmatrix 171.0; the wgmma band with BN 128 at 1/SM 170.3 (default 147.2)
    ("poly exp2 for every element", {"poly": (8, 8)}),
    ("overlap 16-row 4/SM + stmatrix", {"overlap": True, "tile": (64, 64, 128), "min_blocks": 4, "stsm": True}),
    ("wgmma band, BN 128, 4 stages, 1 block/SM", {"wgmma": (128, 4, 1)}),
]
# Run on every case (checked against the reference, timed) so the masked (-inf), unfolded and
# odd-size paths of new code meet the reference.
CHECKED_VARIANTS = [
    ("mma.sync band (all cases)", {"mma": True}),
    # the band on wgmma (cuda_matmul.render_band_wgmma; sm_90 only, elsewhere the mma.sync band).
    # Round 1 (no overlap, 4-byte stores): 305.2 us (BN 128), 324.3 (BN 256) against 146.8. Round 2
    # (the next tile's wgmma issued before this tile's epilogue, two accumulator sets; the output
    # staged for 16-byte streaming stores), 2026-11-30 session 4: 139.8 us against 147.2 (BN 64, 2/SM);
    # BN 128 1/SM 170.3; small cases 1.2-1.6x slower than the mma.sync band.
    ("wgmma band, BN 64, 4 stages, 2 blocks/SM (all cases)", {"wgmma": (64, 4, 2)}),
    # one pass over the logits on a cluster of CTAs (cuda_band_cluster): each logit computed and
    # exponentiated once, the numerators kept in registers as f16 until the cluster has merged the
    # row statistics through distributed shared memory. Per element about 6 issued instructions
    # (against about 11 for the two passes), half the exps (134 M: 32 us of MUFU) and half the
    # tensor work; the write of P (63 us at the copy ceiling) is then the floor. 64-row CTAs: 140
    # regs at 3/SM, 128 at 4/SM, 0 spills, 51 KB smem. Predicted 85-105 us on attention_f16;
    # small cases slower than the mma.sync band (16 CTAs for [4, 256, 256]).
    # Measured (2026-11-30, session 4): 166.9 us at 4/SM (3/SM 183.9; 128-row CTAs at 2/SM 177.9);
    # faster than the mma.sync band on the small cases (7.0 against 8.9 us; bf16 odd 18.7 against
    # 34.8). Persistent clusters (fill 1.0: 66 clusters, but ncu reports at most 62 active) 167.9, at
    # half 188.6. Ablations (timing only, wrong results): without the cluster exchange 102.6 us, without
    # the global stores 114.7, without both 86.2: the exchange (a cluster barrier that waits for the
    # slowest of 8 CTAs, each sharing its SM with 3 others) and the stores after it cost the most.
    ("one pass, cluster, 64-row CTAs, 4/SM (3 with a walked argument) (all cases)", {"cluster": (1,)}),
    # the exchange lagging a band (cuda_band_cluster._lagged): persistent clusters, the statistics pushed
    # with st.async onto the peers' mbarriers while the next band computes, the numerators staged in
    # shared memory, B tiles through a ring of 2 TMA slots (69 KB: 3 CTAs/SM, 155 regs, 0 spills).
    # Predicted 100-120 us on attention_f16 (the no-exchange ablation ran 102.6 at 4/SM). Measured
    # (2026-11-30, session 4): 137.2 us at 0.9 (44 clusters), 156.7 at 0.6; correct on every case.
    ("one pass, lagged exchange, clusters at 0.9 (all cases)", {"cluster": (1, None, 0.9, True)}),
    ("one pass, lagged exchange, clusters at 0.6 (all cases)", {"cluster": (1, None, 0.6, True)}),
    # session 5: the numerators scaled on their way out (store_scaled, the default above). Per band a
    # thread converted 128 f16 numerators to f32, scaled and rounded them back (5 instructions a pair)
    # and, in the lagged band, made a round trip through shared memory for it; now one HMUL2 a pair
    # (f16 output), stmatrix staging, and in the lagged band the factors (one per row and tile: the
    # bases made uniform across a row's four lanes) applied in the 16-byte store loop. Static SASS of
    # attention_f16's lagged kernel: 2880 -> 2136 instructions, 155 -> 148 registers. These two are
    # the previous write paths, for comparison in the same run. Measured (2026-11-30, session 5): lagged
    # 127.4 us against 136.8 for the previous write; the barrier variant 165.2 against 167.7.
    ("one pass, cluster, previous write (f32 scaling) (all cases)", {"cluster": (1, None, 0.0, False, False)}),
    ("one pass, lagged at 0.9, previous write (f32 scaling in place) (all cases)",
     {"cluster": (1, None, 0.9, True, False)}),
    # session 5, round 2: the previous band's store loop cut into one piece after each column tile's
    # statistics (its stores spread over the band, next to the exps, instead of one burst per band),
    # and plain stores instead of streaming ones. Measured: spread 124.5 against 127.4 (now the
    # default); plain stores no difference.
    ("lagged, stores spread over the band's tiles (all cases)", {"cluster": (1, None, 0.9, True, True, True)}),
    ("lagged, spread, plain stores (all cases)", {"cluster": (1, None, 0.9, True, True, True, False)}),
    ("lagged, plain stores (all cases)", {"cluster": (1, None, 0.9, True, True, False, False)}),
    # session 5, round 3 (ncu, 2026-11-30: issue slots 41% busy, 0.69 eligible warps a scheduler, the
    # top stall "wait", a fixed-latency dependency): a row's maximum over a tile ran as one chain of
    # 16 dependent FMNMX, its sum as one of 16 FADD. Independent chains (maximum, sum), merged at the end;
    # measured no difference (124.5-126.6 us for all four): removed (the code is at commit 3c3a0f4).
    # session 5, round 4 (ncu source counters): at the first piece of the spread write the statistics of
    # the last band had not arrived in 74% of the waits (1.05 M spins of the wait loop, 13% of the
    # kernel's instructions). Adaptive: after each tile a piece only when they are in (a non-blocking
    # test), the pieces left after the band; and with the band's statistics pushed as soon as they are
    # final. Measured slower: 135.0 and 136.8 against 125.9. Code removed after the measurement (it was
    # spread modes 2 and 3 of cuda_band_cluster.render at commit 3c3a0f4).
    # session 5, round 5: tiles after a band's first keep the rows' bases (no FMNMX, quad shuffles or
    # rescale: about 70 of 190 instructions a tile) while each thread's part of a row's sum over the
    # tile stays below 16; else the warp redoes the tile with its maximum (cuda_band_cluster.LAZY).
    # Measured 119.2 (one chain) against 125.6: now the default for the lagged band; this is without.
    ("lagged, no lazy bases (previous) (all cases)", {"lazy": False}),
    # session 5, round 6: the lagged band's four lanes of a row did the same work on the exchange: each
    # pushed nothing but lane 0 pushed to all 8 peers (48 issues for the warp), and each merged all 8
    # peers' statistics (about 120 instructions a band). Split across the four: 2 peers each, merged by
    # two shuffles (cuda_band_cluster.QUAD_MERGE). Measured 116.4 against 120.3: now the default; this
    # is without.
    ("lagged, exchange not split (previous) (all cases)", {"quad_merge": False}),
    # the persistent grid again with the faster kernel: 0.8 of the clusters that fit, and all of them
    # (49 rendered; the loader launches the 45 the driver runs at once). Measured 128.6 and 115.1
    # against 116.5 at 0.9 (kept: a margin from the second-wave cliff at 46 clusters).
    ("lagged at 0.8 (all cases)", {"cluster": (1, None, 0.8, True)}),
    ("lagged at 1.0, clamped by the loader (all cases)", {"cluster": (1, None, 1.0, True)}),
    # the spread pieces a tile later (after tiles 1-3 and after the band), so the first waits on the
    # last band's statistics a tile later than now (ncu: 74% of first tries found them late). Measured
    # 114.8 against 115.1 for the default spread (and 117.0 for the same default kernel in that run):
    # within noise, not taken (spread mode 4 at commit 3c3a0f4, removed).
    # session 5, round 7: a lazy tile's row sums by the tensor cores (the f16 numerators, already in the
    # registers of wgmma's A layout, times a 16 x 8 block of ones: 4 HGMMA.64x8x16 a tile instead of
    # 32 FADD a thread; the whole row's sum in every lane, so no quad sum for it), at the cost of
    # waiting for that wgmma before the tile's check (cuda_band_cluster.TC_SUMS). Measured 117.1 against
    # 116.3 (correct on every case, GPU tests pass): the wait costs what the FADDs did; not taken
    # (TC_SUMS at commit 3c3a0f4, removed).
    # session 6: more warps a multiprocessor. The lagged band ran 3 CTAs of one warpgroup (12 warps) a
    # multiprocessor, latency bound (0.69 eligible warps a scheduler), held there by registers (150) and
    # shared memory (70 KB). Now (the default) each tile's numerators go to shared memory as soon as its
    # statistics are done, into the columns the last band's piece of the write just freed (pieces by
    # column tile), so no band's numerators wait in registers (150 -> 128 registers), and a row's
    # statistics travel as one float (log2 of its sum of 2^x) instead of (max, sum), halving the
    # exchange buffer (66 KB). Measured (2026-11-30, session 6): 115.1 us against 116.3 for the previous
    # kernel (commit 3e629c4, same device call). That let a CTA hold two warpgroups (128-row bands)
    # sharing the B ring: 2 CTAs of 8 warps a multiprocessor (123 registers, 110 KB). Predicted 100-108
    # (16 warps instead of 12, half the B loads); measured 120.2 at 0.9 of the clusters, 116.2 at all:
    # no gain (the two warpgroups meet at a block barrier before every B refill). Not kept (the
    # variant's code never handled a walked argument's rows in the second warpgroup; not committed).
    # session 6, round 2: with 128 registers, shared memory alone keeps a fourth CTA off a multiprocessor
    # (65.5 KB). The A band (8 KB) moves to registers: every thread loads its wgmma A fragments (16
    # registers of f16 pairs) from global memory, the next band's right after the band's last wgmma
    # retires, and the wgmma read A from registers (cuda_band_cluster.A_REGS): 56 KB, 127 registers,
    # 4 CTAs (16 warps) a multiprocessor, 59 clusters at 0.9. Predicted 100-108 us. Measured (correct on
    # every case): 116.4 at 0.9, 113.2 at all 66 clusters, against 113.0 for the default in the same run:
    # no gain again from a third more warps, so the kernel is not held back by too few warps in flight.
    # Not kept (the code, A_REGS and wgmma with A from registers, was never committed).
    # session 6, round 3: the K tiles resident. With the A band in registers, a CTA's four B tiles (32 KB)
    # fit in place of the ring's two at 3 CTAs a multiprocessor (73.7 KB, 145 registers); each cluster
    # walks a run of consecutive bands (one batch's K for about 23 bands) instead of bands `clusters`
    # apart, so the B tiles load once a batch: no TMA, ring wait or block barrier per tile
    # (cuda_band_cluster.RESIDENT). Predicted 105-110 us. Measured (correct on every case): 123.3 at 0.9,
    # 120.1 at all clusters, against 114.6 for the default in the same run: slower. Not kept (not
    # committed). Taken with the A-in-registers and two-warpgroup rounds: neither more warps nor fewer
    # barriers and loads a tile move this kernel; benchmarks/write_ceiling.py puts the write of P alone
    # at 63.5-67.5 us on the H200 (2026-11-30), so about 47 us of the 114 are the band's own latency.
    # session 7: ncu source counters of v13 (1.30 GHz, 2026-11-30-h200-ncu-attention-session7-source.txt):
    # 9.75 issued instructions a logit (1249 a warp and band); of the warp stall samples 13% sit on
    # mbarrier waits (the last band's statistics 4.8%, the next band's A and first B tiles 3%, tiles 2
    # and 3 of the ring 4%), 5% on the first wgmma of a tile, 17% on MUFU.EX2 (fixed latency and its
    # queue), and the spin on the statistics issues 123 instructions a warp and band (10%).
    # - prefetch (the default now, cuda_band_cluster.PREFETCH): two A buffers (the next band's A loaded a
    #   band ahead) and the next band's B tile 0 loaded once tile 2 retires instead of after tile 3 (73.7
    #   KB: still 3 CTAs a multiprocessor). Predicted 2-4%. Measured in three device calls: 109.0 / 109.0
    #   / 109.1 against 110.2 / 110.1 / 110.3 (-1.0%). The row below is the kernel before it.
    ("lagged, one A buffer, next band's tiles after the last (previous) (all cases)", {"prefetch": False}),
    # - interleave (the default now, cuda_band_cluster.INTERLEAVE): a later tile's write piece in four
    #   chunks placed among the tile's lazy exps (each chunk's store predicated, not branched around, so
    #   ptxas spreads the loads and stores among the MUFU instructions instead of after them; 146
    #   registers). Predicted 2-6% if the stores cost by bunching; else no change. Measured 107.6 / 107.1
    #   against 109.1 / 109.6 in one device call (-1.9%), every case correct
    #   (`2026-11-30-h200-ab_attention-session7-interleave.md`). The row below is the kernel before it.
    #   Where a chunk goes among its four pairs did not matter: after pair 4j 108.2 / 108.2, after 4j + 1
    #   108.3 / 108.3, after 4j + 3 (the default) 107.7 / 108.4, none 109.8 / 109.3 (`-interleave-placement.md`).
    ("lagged, pieces after the tile's exps (previous) (all cases)", {"interleave": False}),
    # session 8 (`2026-11-30-h200-ab_attention-session8-{1,2,3,4,5}.md`, one file a device call):
    # - the pieces' stores from one output pointer a band at constant offsets (OUT_BASE, the default;
    #   146 -> 142 registers, static SASS 2464 -> 2392). Predicted 1-2%. Measured 107.1 / 106.9 against
    #   107.9 (-0.8%, call 1); 104.1-104.4 against 105.6 and 106.0 (calls 2, 4). The row below is without it.
    ("lagged, piece addresses from the band's coordinates (previous) (all cases)", {"out_base": False}),
    # - v16, piece 0's chunks in tile 1's lazy pass too (INTERLEAVE0, the default; its statistics and
    #   factors still after tile 0, tile 0's numerators staged after tile 1: 162 registers, still 3 CTAs a
    #   multiprocessor). Predicted 0.5-1% (a quarter of what v15 gained). Measured 105.0 against 107.1
    #   (call 1), 104.3 / 104.1 / 104.1 (the default's identical rows) against 106.8 (call 2), 104.4-104.6
    #   against 106.3 (call 3); every case correct. The row below is without it.
    ("lagged, piece 0 after tile 0 (previous) (all cases)", {"interleave0": False}),
    # - the statistics' layout (PART_PAD 8, the default): ncu counts 4x the ideal shared wavefronts on the
    #   four loads of a row's statistics after the wait (q = lane % 4 + 4i read rows 64 floats apart: one
    #   bank for the four lanes of a row); 8 floats after each sender's rows spread them over 4 banks.
    #   Predicted < 0.5%. Measured 104.1 against 104.6 / 105.5 / 105.5 for the unpadded kernel's identical
    #   rows (call 5, `-session8-5.md`). The row below is without it.
    ("lagged, statistics unpadded (previous) (all cases)", {"part_pad": 0}),
    # session 9 (`2026-11-30-h200-ab_attention-session9-{1,2,3}.md`), measured and not kept (each correct on
    # every case, also when checked again after the timed launches; the code removed after measuring):
    # - the clusters claim their bands from a device counter (DYNAMIC at commit 8b26ae5: rank 0 claims
    #   three bands ahead and pushes the claim with its statistics; the last cluster out resets the
    #   counter). ncu of v16 has the multiprocessors active 89% of the elapsed cycles, and the static walk
    #   leaves 32 of 44 clusters idle for the last of 24 rounds. Predicted 2-5% faster. Measured 108.2
    #   against 104.8 with atomicAdd (ptxas aggregates it over the warp and shuffles the old value at once,
    #   so the warp waits for the atomic where it is issued), then 106.3 / 105.6 (45 clusters) against
    #   104.7 with the atomic predicated in inline PTX (waited for only at the push): slower.
    # - `benchmarks/cluster_placement.py` then found 8 of the 132 multiprocessors without any CTA of the
    #   8-CTA clusters (104 hold 3 and 20 hold 2 at 44 clusters; the same 8 empty at 33 or 45). Without
    #   hardware clusters (GLOBAL_EXCHANGE at commit 272240b): a CTA's cluster and rank from a ticket taken
    #   at its start (so no deadlock whatever else runs), each row's statistics an 8-byte word (log2 sum,
    #   sequence number of epoch and round) in global memory that the peers poll. Predicted 92-100 us at
    #   49 clusters (392 CTAs over all 132 SMs). Measured 108.0 at 49 clusters and 113.0 at 44 against
    #   104.4: the exchange's L2 round trips on the wait cost more than the 8 multiprocessors give.
    # - measured and not kept (code removed after measuring; each correct on every case):
    #   - a tile's numerators staged during the next tile's lazy pass (matrix q of tile t - 1 after pair
    #     4q + 2 of tile t, as the write's chunks are; 164 registers). Predicted 1% (the staging's 3 us
    #     spread like the stores). Measured 106.8 against 104.2 (call 2): slower.
    #   - piece 0's chunks in tile 0's exps instead (its statistics waited for after tile 0's maximum,
    #     just before its exps; tile 0's numerators staged right after it: 147 registers): 105.9 (call 3).
    #   - the next band's first wgmma issued early, after the band's last tile (under the merge, the push
    #     and the next band's start) 106.0, or before the last tile's statistics 108.9 (both with the one
    #     above 108.2; call 3). Predicted 1-3% faster (a tile's wgmma latency a band): wrong, slower.
    #   - the wait for the last band's statistics without the spin: ncu of v16 (`2026-11-30-h200-ncu-
    #     attention-session8.txt`) finds it failing its first try in 68% of rounds and spinning 21.8 times
    #     a warp and band, each spin 8 instructions (try_wait, the clock, a 64-bit compare for the timeout
    #     trap): 14% of the kernel's issued instructions. Each try suspending up to 1000 / 20000 ns
    #     (suspendTimeHint) 104.4 / 104.1, a nanosleep between tries (doubling up to 256 / 1024 ns) 103.6 /
    #     103.8, against 104.4 for the default and 104.1 / 103.8 for its identical rows (call 4): noise.
    # Session 7, measured and not kept (its calls; the code removed after measuring):
    # - TMA stores: the ablations show the 16-byte store instructions costing 16-19 us where stmatrix
    #   moves the same bytes in 3. So each piece was scaled in place (ldmatrix, HMUL2, stmatrix: a lane's
    #   rows are its own, so no factor table) and written by one lane's 2-D tensor store from a
    #   128-byte-swizzled block of 16 rows x 64 columns; each warp kept a spare block so that the next
    #   band's tile was staged while the store still read the old one (`cp.async.bulk.wait_group.read 1`
    #   before staging; no second A buffer then: 70 KB, 3 CTAs a multiprocessor, 137 registers).
    #   Predicted 95-105 us. Measured 120.3 / 120.4 against 109.2 / 109.2, correct on every case and in
    #   the GPU tests (`-session7-tma-store.md`): slower.
    # - early loads: the ablations (below) show the write pieces' 16-byte stores costing 16-19 us whether
    #   they go to DRAM, L2 or shared memory, while the stmatrix staging (the same bytes) costs 3. Guess:
    #   a piece's stores wait on its loads (staged chunk and factor, then HMUL2); so the piece's chunks
    #   and factors were loaded before the tile's statistics (20 registers: 124 -> 142, still 3 CTAs a
    #   multiprocessor). Predicted 3-8% if that chain is the cost. Measured 110.5 / 111.0 against 109.3 /
    #   110.0: no gain; the 16-byte store instructions themselves are the cost (about 8 cycles each of
    #   the SM's store path: 64 bytes a clock, where stmatrix moves the same bytes in about 1.3).
    # Measured and not kept (same calls; their code removed after measuring):
    # - the exps of 1/8 (1/4) of the pairs on the FMA pipe (cvl_ex2_fma: 11 instructions for one MUFU
    #   issue and 8 cycles of its pipe). Predicted 0-2% either way at 1/8, slower at 1/4. Measured 113.2 /
    #   112.8 / 113.4 (1/8) and 117.3 / 116.4 / 117.6 (1/4): slower, as the ablation below explains.
    # - a suspend-time hint on every try_wait (100 us: 112.5 / 112.4 / 113.1; 2 us: 112.0 / 112.3 / 112.8)
    #   and polling by test_wait (112.2; with prefetch 110.3 against 109.1): the spin on the last band's
    #   statistics issues 10% of the instructions but costs nothing the alternatives do not cost more.
    # Session 10: a tile's row sums on the tensor cores by mma.sync (cuda_band_cluster.MMA_SUM): the f16
    # numerators of each 16-column slab are already an mma A fragment, so one m16n8k16 against ones adds
    # the slab's row sums (the whole row's, in all four lanes): 4 HMMA a tile instead of 32 FADD a thread,
    # no quad sum after the band, and no warpgroup wait (session 5's wgmma sums, TC_SUMS, waited for the
    # wgmma before the tile's check and lost 0.7%). The lazy check becomes the row's tile sum below 64.
    # Static SASS 2349 -> 2126 instructions, 162 -> 166 registers (3 CTAs a multiprocessor). Predicted
    # 1-3% (about a tenth of the issued instructions, and the FADD chains of the lazy pass).
    # Measured (two calls, `2026-11-30-h200-ab_attention-session10-1.md`): 103.8 / 103.7 against 103.5 / 105.3
    # for the default and 104.8 / 103.6 for its identical row: no gain, like TC_SUMS. The FADDs are not what
    # the band waits for. Not kept (commit c0c2f7f has it; its bf16 case failed there because it took bf16 mma for
    # the numerators, which are f16 pairs whatever the output type).
    # Session 10, round 2: piece 0's four chunks (the first piece of the last band's write, whose
    # statistics are waited for after tile 0) all went into tile 1's lazy pass with piece 1's: 8 chunks
    # there, 4 in tiles 2 and 3, none in tile 0. Spread over tiles 1-2 (2 + 2) or 1-3 (2 + 1 + 1)
    # (cuda_band_cluster.PIECE0_TILES), tile 0's numerators staged after the last of them (no more
    # registers: one other tile's numerators are live then, as in tile 1 now; 161 registers).
    # Predicted 0.5-1.5% (v16, which moved piece 0 into tile 1's pass, gained 2.3%).
    # Measured (one call, three runs, `-session10-2.md`): 106.3 / 106.3 / 105.4 (tiles 1-2) and 105.9 / 106.2 /
    # 105.5 (tiles 1-3) against 103.9 / 103.4 / 103.5 for the default (103.4 / 103.8 / 103.6 again) and 106.0 /
    # 106.4 / 106.1 with piece 0 after tile 0: 2.3% slower, as slow as before v16. Wrong: spreading the stores
    # is not what v16 gained. Guess: what it gained is two adjacent pieces stored together (piece 0's chunk j
    # next to piece 1's: 256 contiguous bytes a row), which the split undid. Not kept (the code is
    # piece0_tiles at commit 8bdbaaf).
    # Round 3, that guess: which lazy pass carries each piece (cuda_band_cluster piece_tiles; default
    # (1, 1, 2, 3)). Pieces 2 and 3 together in tile 3 (tile 2's numerators staged after tile 3: one more
    # tile's numerators live there, as in tile 1 now); pieces 2 and 3 together in tile 2 (every store done by
    # tile 2); pieces 1 and 2 together in tile 2; all four in tile 1 (512 contiguous bytes a row).
    # Predicted: if adjacency is what counts, (1, 1, 3, 3) and (1, 1, 2, 2) 1-2% faster, (1, 2, 2, 3) about
    # the same, (1, 1, 1, 1) faster still unless bunching 16 chunks in one pass costs more.
    # Measured (one call, three runs, `-session10-3.md`; default 104.0 / 104.0 / 104.2, again 104.8 / 103.5 /
    # 103.3): (1, 1, 3, 3) 104.8 / 105.8 / 105.5; (1, 1, 2, 2) 104.6 / 105.0 / 105.5; (1, 2, 2, 3) 107.0 / 106.7 /
    # 107.1; (1, 1, 1, 1) 107.0 / 107.4 / 107.7. None faster: the default's placement stays, and the guess
    # (adjacent pieces) does not explain the landscape ((1, 2, 2, 3) pairs adjacent pieces and is 3% slower).
    # Not kept (piece_tiles at commit eb0256b).
    # Round 4: a block barrier before every B refill (4 a band: thread 0 issues the TMA once the CTA's four
    # warps are past the slot's wgmma) holds every warp to the slowest each tile; ncu puts 3.4% of the
    # stall samples on it. Now the last warp past the slot refills it: lane 0 of each warp adds one to the
    # slot's shared counter (atom.acq_rel), and the warp that finds three before it issues the TMA; no
    # warp waits (cuda_band_cluster.ELECT_REFILL). Predicted 0.5-2%.
    # Measured (one call, three runs, `-session10-4.md`): 115.3 / 114.6 / 114.3 against 104.7 / 104.5 / 103.9
    # (again 104.0 / 103.7 / 104.5): 10% slower. ptxas puts a MEMBAR.ALL.CTA before each acq_rel atomic,
    # which waits for the warp's streaming stores in flight; with a relaxed atomic instead (no fence; a
    # probe, not a correct release) 113.6 / 112.8 / 113.4 against 104.7 / 104.0 / 104.7 (`-session10-5.md`):
    # still 8% slower. So the barrier helps: the CTA's four warps kept in step each tile are faster than
    # warps left to drift. Not kept (commit a5f0e0a).
    # Round 5, the converse: more steps in lockstep. A block barrier after a tile's statistics (before the
    # last band's head after tile 0, before the staging after tiles 1-3) (`sync_after`). Predicted: if
    # lockstep itself pays, 1-3% faster with barriers after every tile; if what paid was the refills'
    # timing, no change or slower.
    # Measured (one call, three runs, `-session10-6.md`; default 104.3 / 103.8 / 104.2, again 103.6 / 103.7 /
    # 103.8): after every tile 104.4 / 104.4 / 105.3, after tile 0 103.7 / 103.8 / 103.8, after tiles 1-3 104.2 /
    # 104.3 / 104.9. No gain: lockstep as such does not pay; what the refill barrier gives is not known
    # (the refills' timing is the same either way). Not kept (a three-line switch, not committed).
    # Round 6, the kernel's ends (the timeline ablation below): no cluster barrier before leaving (every
    # push into a CTA has landed once it has waited for the last band's statistics, which its last write
    # does), and the two tensor maps prefetched first thing (prefetch.tensormap) so that the first loads do
    # not wait for the descriptors. Predicted 0.5-1 us together.
    # Measured (`-session10-9.md`, three runs): no exit barrier 103.3 / 103.3 / 103.2 against 104.5 / 103.8 /
    # 103.7 (again 103.9 / 104.4 / 103.8): -0.5 us; tensor maps prefetched 103.9 / 103.6 / 103.7: no change. The
    # timeline: thread 0's set up and loads take 0.3 us, the block barrier 0.03, the set-up's cluster barrier
    # 1.1 us (every CTA started within 0.06 us of the others, so not a wait for a late peer); the launch
    # alone (an empty body, this kernel's grid, clusters and shared memory) measures 3.7 us.
    # Round 7: that barrier split: arrive after the set up, wait just before the band's first push (round
    # 0's statistics; the only thing that needs every peer's mbarriers), so band 0 computes under it.
    # Predicted about 1 us more. Measured (`-session10-10.md`, three runs; default 103.7 / 104.1 / 103.7, again
    # 104.1 / 103.5 / 104.2): no exit barrier 103.0 / 102.9 / 103.0 (-0.7%, as in round 6); with the split
    # set-up barrier too 102.9 / 103.4 / 103.8: no further gain. Its timeline still shows 1.06 us from the
    # block barrier to past the cluster arrive alone: the arrive's release waits (likely for thread 0's
    # loads just issued), and band 0 waits for those loads anyway. The exit barrier is gone now
    # (cuda_band_cluster.EXIT_SYNC False); the split and the prefetch were not kept (switches of a few lines,
    # not committed).
    ("lagged, exit barrier (previous) (all cases)", {"exit_sync": True}),
    # session 11: the launch. An empty launch of this kernel's shape measures 3.7 us of the 103. The loader
    # sets no shared-memory carveout preference, so the driver picks the split of L1 and shared memory; the
    # L2 flush before each sample (a memset) uses none. With the preference at 100 (all shared), no SM need
    # change its split between launches. Predicted: 0-1 us, if the split is reconfigured per launch.
    # Measured (`-session11-1.md`, two runs): 104.0 / 103.4 against 105.0 / 103.6 and identical rows 102.9 /
    # 104.0; the empty launch 4.2 / 3.6 against 3.7 / 4.1: no effect. The driver's own choice already fits.
    # Not kept (the "carveout" key of Built, and this variant and its ablation, are at commit da33d8a).
    # session 12: a writer warp (cuda_band_cluster.WRITER). The ablations of session 7 put the write's store
    # instructions at 16-21 us of the band's time on its own warps (87 us without them), though the
    # multiprocessor's units are each under 70% busy: the cost is the warpgroup issuing them between its
    # phases. A fifth warp per CTA (160 threads, 127 registers: still 3 CTAs a multiprocessor) now does the
    # whole write of the last band: it waits for the band's staging (an mbarrier the 128 threads arrive
    # on) and for the cluster's statistics, merges them for its 64 rows, fills the factor table (the tile
    # bases come in the 16 bytes of padding after each staged row), then per column tile loads its 16
    # chunks a lane, scales them and stores them, and hands the columns back (an mbarrier per tile that the
    # warpgroup waits for before staging the next band's tile there). The warpgroup keeps the exps, the
    # staging and the pushes, and syncs on a named barrier of its own 128 threads. Predicted 90-97 us if the
    # stores overlap the compute as a separate warp; no gain if their cost is the units they share.
    # Measured (`-session12-1.md`, `-session12-2.md`): correct on every case; 110.4 and 110.0 us against
    # 103.6 / 103.0 and 103.9 / 103.6 for the default; with tile 0 staged a tile later (more slack before
    # the first wait for the writer) 109.6. The ablations without any global store: the default's kernel
    # 86.6, the writer's 95.4. So the stores cost about as much from a warp of their own (14.6 us) as
    # interleaved among the exps (17.0), and the hand-off costs 9 more: their cost is the units they use
    # (the L1/shared data path the wgmma operands, stmatrix and the staged loads share), not the issue
    # slots of the warps that run them. Not kept (the WRITER switch and the variants are at commit 01fba7f).
    # session 12, next: if the L1/shared data path is what binds, fewer bytes through it should pay. A CTA's
    # band moves about 160 KB through it: the wgmma's A reads (32 KB: each tile's wgmma reads the whole A
    # band), B reads (32), stmatrix staging (32), the write's staged loads (32) and its stores (32). With A
    # from registers (wgmma's RS form; each warp's 16 rows loaded once a band by 4 ldmatrix x4, 8 KB a band),
    # 24 KB fewer (15%). Session 6 measured A in registers at no gain, on an older kernel at 4 CTAs a
    # multiprocessor; here 164 registers (162 without INTERLEAVE0), still 3 CTAs a multiprocessor.
    # Predicted 2-6% faster if the data path binds, no change if not.
    # Measured (`-session12-3-1.md`, `-3-2.md`, one device call): A from registers 102.9 / 102.7 us against
    # 104.4 / 105.0 for the default and 103.9 / 104.7 for its identical row (-1.7% on average); without
    # INTERLEAVE0 103.3 / 103.8 against 105.5 / 105.5. Correct on every case. At the low end of the
    # prediction: the data path is part of what binds. The default now (cuda_band_cluster.A_REGS).
    ("lagged, A from shared memory (previous) (all cases)", {"a_regs": False}),
    # session 13: back to back (as `run` replays) the kernel takes 98.4 us, after the bench's flush (a memset
    # of 126 MB: the L2 full of dirty lines) 103.4, after a clean flush with Q and K in L2 101.4
    # (flush_probe.py); the timeline (--no-flush against the flush) puts the difference in the loop's rounds
    # (loop ends 91-92 us against 95), not in the set up or round 0. Whether an L2 policy of P's stores or
    # of the Q and K loads closes any of it after the flush; predicted at most 1%, either way. Measured in
    # two runs (`-session13-l2policy-{1,2}.md`; the knobs are at commit bf29bca): P by plain st.global
    # 100.6 / 99.7, evict_unchanged 100.4 / 100.0, evict_normal 100.5 / 100.5, evict_first by createpolicy
    # 102.8 / 102.5; Q and K loads evict_last 101.8 / 103.4; against 99.5 / 100.1 for the default's
    # identical row at the end of each run (the default itself, timed first, 102.8 / 103.3: drift within
    # a run, see placement_probe.py). None faster; not kept.
    # session 17: the band is latency bound at 3 CTAs (12 warps) a multiprocessor; 4 need at most 128
    # registers and about 56 KB. Two column tiles a CTA in clusters of 16 (non-portable: the loader opts the
    # kernel in) instead of four in clusters of 8: 127 registers at min 4 blocks, 43 KB + 11 KB of shared
    # memory without the A band's second buffer (PREFETCH), no spills (ptxas, CPU). The cost: every CTA loads
    # the band's Q rows (twice the Q traffic from L2), 15 peers' statistics a band instead of 7, and each
    # band's fixed work over half the elements. Predicted 95-105 us.
    ("lagged, clusters of 16 CTAs of 2 tiles, 4/SM, no A prefetch (all cases)",
     {"cluster_tiles": 2, "cluster_max": 16, "cluster": (1, 4, 1.0, True), "prefetch": False}),
    ("lagged, clusters of 16 CTAs of 2 tiles, 3/SM (all cases)",
     {"cluster_tiles": 2, "cluster_max": 16}),
    # session 36 (not yet measured): the other way. Clusters of 8 at 3 CTAs a multiprocessor reach at most 124 of the
    # 132 SMs and the driver runs 45 of them at once (120 SMs' worth): 1024 bands in 23 rounds. Clusters of 4 CTAs of
    # 8 tiles ("cluster_tiles" 8: 66 KB of staged rows, 100 + 5 KB of shared memory, 2 CTAs a multiprocessor, 194
    # registers, no spill) can fill all 132 (66 clusters, 16 rounds, the last about half full); each band's fixed work
    # (the A band and its ldmatrix, the exchange with 3 peers instead of 7, the merge) spreads over twice the columns
    # and Q comes from L2 half as often. Against it: 8 warps a multiprocessor instead of 12 (sessions 6 and 17 found
    # more warps no help, so perhaps no harm either), the band's last write twice as long, and twice the code (4200
    # SASS instructions: the instruction cache may miss). Predicted 92-96 us in the bench (102.3 in session 24) if a
    # multiprocessor's throughput holds at 8 warps; 100-110 if it falls.
    ("lagged, wide: clusters of 4 CTAs of 8 tiles, 2/SM (all cases)", {"cluster_tiles": 8}),
]
# Timing-only ablations of the lagged band on the first case (--ablations): parts of the work left out, so
# the results are wrong and not counted as failures; they bound what removing each part could gain. They
# run with the write pieces after the exps (the interleaved write off), as they were measured.
# Measured (2026-11-30, session 7, against 110.3 for the default then): no stores 87.4 us, no MUFU exps
# 107.5, neither 76.5. The MUFU is not what holds the band back; the compute without the stores (87 us)
# is above the write's 63.5-67.5, and the stores add 23 us to it instead of overlapping.
ABLATIONS = [
    # session 10: not an ablation of work but a timeline (the kernel unchanged): thread 0 of each CTA notes
    # %globaltimer at its start, after the set-up, after round 0, after the loop, after the last band's write
    # and at its exit (timeline_summary reads them from the last timed launch). The kernel's time against the
    # batch (--batches) is about 7 us plus 3.0 us a batch entry: where do the 7 us go?
    # Measured (`-session10-8.md`, events 104.4 us): every CTA starts within 0.06 us; set up (to past the
    # first cluster barrier) 1.57 us; round 0 3.39; the loop ends at 94.9 (92.7-97.7: clusters of 22 and 23
    # bands); the last band's write 1.82, the exit barrier 1.15; the last CTA leaves at 99.3. So 5 us of the
    # events' time lie outside the kernel's span, 1.6 before its loop and about 4 after its loop.
    ("timeline (kernel unchanged)", {"ablate": ("timeline",)}),
    # round 2: the set up in three parts (thread 0's loads issued, past the block barrier, past the cluster
    # barrier); and the launch alone ("empty": the same signature, grid, clusters and shared memory, no body):
    # what the events measure of a launch of this shape. Measured (`-session10-9.md`): thread 0's set up and
    # loads 0.3 us, the block barrier 0.03, the cluster barrier 1.1; the empty launch 3.7 us.
    ("ablation: the launch alone (empty body)", {"ablate": ("empty",)}),
    ("ablation: no stores of P", {"ablate": ("store",)}),
    ("ablation: numerators by FFMA, no MUFU exp2", {"ablate": ("exp",)}),
    ("ablation: neither", {"ablate": ("store", "exp")}),
    # session 7, round 2: the stores' 23 us split. Into the output's first 4 MB (L2-resident, so no DRAM
    # write traffic): if about 87 us, DRAM pressure is the cost; if about 110, the store path itself.
    # Without the staged numerators' 16-byte loads (the stores kept): the shared-memory reads' share.
    # Measured (same call, default 109.2, no stores 88.0): inside 4 MB 107.1, without the loads 106.4.
    # So DRAM is not what the stores cost: issuing 268 MB of 16-byte stores from the SMs (the LSU and
    # MIO queue the MUFU, shared loads and stmatrix also use) costs about 19 us even when L2 absorbs
    # them all; the staged loads about 3.
    ("ablation: stores inside 4 MB (L2, no DRAM writes)", {"ablate": ("store_l2",)}),
    ("ablation: stores without the staged loads", {"ablate": ("lds",)}),
    # round 3: each 16-byte global store replaced by a 16-byte shared store of the same value (back into
    # its staged chunk): the same instructions on the LSU, no traffic to L2. About 88 us: the stores
    # cost their traffic to L2; about 107: their instructions. Measured (default 109.1, no stores 87.6,
    # inside 4 MB 106.6, without the staged loads 106.0): 104.2. So 16.6 of the stores' 21.5 us are the
    # 16-byte store instructions themselves (the SM's store data path), 2.4 the traffic to L2 and 2.5
    # DRAM; write_ceiling.py's L2-only band pattern takes 59.2 us (67.7 to DRAM).
    ("ablation: shared stores instead of global ones", {"ablate": ("sts",)}),
    # round 4: shared memory's write side. Model: the SM writes shared memory (and passes global stores)
    # at about 64 bytes a clock, and a warp and band writes 8 KB by stmatrix, 8 KB of stores and 10 KB
    # by TMA: about 59 us a kernel at 1.755 GHz. If so, dropping the staging (stmatrix) gains about as
    # much as dropping the stores (21 us); if it gains little, the staging is not worth the registers
    # and shuffles of a register-resident write (NOTES, next steps). Measured (default 109.1): no staging
    # 105.7, no staging and no stores 86.0 (no stores 88.4): the staging costs 3 us for the same bytes the
    # stores write in 16-21, so the model is wrong: the 16-byte store instructions are the cost, not the
    # bytes written (stmatrix moves them about 6 times faster).
    ("ablation: no staging (stmatrix) of the numerators", {"ablate": ("stage",)}),
    ("ablation: no staging, no stores", {"ablate": ("stage", "store")}),
]


def cases(tmp: Path) -> list[tuple[str, Path]]:
    (tmp / "attn_bf16_odd.cuvil").write_text(ODD_BF16)
    (tmp / "attn_bf16_odd.yaml").write_text(ODD_BF16_SPEC)
    return [
        ("attention_f16 [32, 2048, 2048], D 64", ROOT / "benchmarks" / "attention_f16.yaml"),
        ("attention_scores [4, 256, 256]", ROOT / "specs" / "attention_scores.yaml"),
        ("masked_attention [4, 256, 256]", ROOT / "specs" / "masked_attention.yaml"),
        ("bf16 odd [8, 1000, 1000], D 40", tmp / "attn_bf16_odd.yaml"),
        ("programs/attention_f16 (masks, log_softmax)", ROOT / "tests" / "codegen" / "programs" / "attention_f16.yaml"),
    ]


# --sweep: attention_f16 at other sizes, to place the switches between the band's engines
# (cuda_matmul.row_band_engine): (B, M, N), D 64
SWEEP = [(4, 2048, 2048), (8, 2048, 2048), (16, 2048, 2048), (32, 1024, 1024), (64, 512, 512), (128, 256, 256)]
SWEEP_RUNS = [("mma.sync band", {"mma": True}), ("wgmma band", {"wgmma": (64, 4, 2)}),
              ("cluster band", {"cluster": (1,)}), ("lagged cluster band", {"cluster": (1, None, 0.9, True)})]
# --small (session 17): grids that leave most SMs idle, where a band spread over more CTAs of fewer column tiles
# (ROW_BAND_TUNING "cluster_tiles") may pay: [4, 256, 256] ran 6.9 us by default (16 CTAs), 6.5 in clusters of two
# CTAs of 2 tiles; masked [4, 256, 256] 10.7 against 8.3.
SMALL = [(1, 256, 256), (4, 256, 256), (16, 256, 256), (2, 512, 512), (8, 512, 512), (1, 1024, 1024),
         (4, 1024, 1024), (1, 2048, 2048), (2, 2048, 2048)]
SMALL_RUNS = [("2 tiles a CTA", {"cluster_tiles": 2}), ("1 tile a CTA", {"cluster_tiles": 1})]


def sweep_cases(tmp: Path, sizes=SWEEP, kind: str = "sweep") -> list[tuple[str, Path]]:
    out = []
    (tmp / "attention_f16.cuvil").write_text((ROOT / "benchmarks" / "attention_f16.cuvil").read_text())
    for b, m, n in sizes:
        spec = tmp / f"attn_{b}_{m}_{n}.yaml"
        spec.write_text("pipeline: attention_f16.cuvil\n"
                        f"shapes: {{B: {b}, M: {m}, N: {n}, D: 64}}\ncheck: {{rtol: 2.0e-3, atol: 2.0e-3}}\n")
        out.append((f"{kind} attention_f16 [{b}, {m}, {n}]", spec))
    return out


def load(path: Path):
    from cuvil_dsl.frontend import check_file
    from cuvil_dsl.spec.binding import bind, select_pipeline
    from cuvil_dsl.spec.loader import load_spec

    loaded = load_spec(path)
    checked = check_file(loaded.pipeline_path)
    assert checked.ok, [str(d) for d in checked.diagnostics]
    pipeline = select_pipeline(loaded, checked.module)
    return loaded, pipeline, bind(loaded, pipeline)


def fresh_inputs(binding, pipeline, seed: int) -> dict[str, np.ndarray]:
    """The spec's inputs (positions stay aranges), floats replaced by fresh normal values."""
    from cuvil_dsl.spec.inputs import make_inputs

    rng = np.random.default_rng(seed)
    arrays = make_inputs(binding, pipeline)
    for name, a in arrays.items():
        if a.dtype.kind == "f" or str(a.dtype) == "bfloat16":
            arrays[name] = rng.standard_normal(a.shape).astype(a.dtype)
    return arrays


def matches(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[bool, float]:
    """LANGUAGE.md section 7's check; also the largest error relative to the tolerance."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    if g.shape != w.shape or not (np.isnan(g) == np.isnan(w)).all():
        return False, float("inf")
    finite = np.isfinite(w)
    if not (g[~finite & ~np.isnan(w)] == w[~finite & ~np.isnan(w)]).all():
        return False, float("inf")
    scale = max(1.0, float(np.max(np.abs(w[finite]))) if finite.any() else 1.0)
    allowed = atol * scale + rtol * np.abs(w[finite])
    worst = float(np.max(np.abs(g[finite] - w[finite]) / allowed)) if finite.any() else 0.0
    return worst <= 1.0, worst


def render(loaded, pipeline, binding, row_band: bool, arch: str, tuning: dict | None):
    """The plan and its rendered kernels with the template switch and tuning set for this build only."""
    from cuvil_dsl.codegen import cuda_matmul, render_cuda
    from cuvil_dsl.passes import plan_pipeline

    cuda_matmul.ROW_BAND = row_band
    cuda_matmul.ROW_BAND_TUNING.clear()
    cuda_matmul.ROW_BAND_TUNING.update(tuning or {})
    try:
        plan, diags = plan_pipeline(pipeline, dict(loaded.spec.kernels), arch)
        assert not [d for d in diags if d.is_error], diags
        return plan, render_cuda(plan, binding.sizes, arch, tf32=loaded.spec.target.tf32)
    finally:
        cuda_matmul.ROW_BAND = True
        cuda_matmul.ROW_BAND_TUNING.clear()


def prewarm(loaded, pipeline, binding, runs, arch: str) -> None:
    """Compile every build of a case in one call (the compile service's worker threads), so each
    Built below finds its units in the in-process cache: keeps the script well under 90 s."""
    from cuvil_dsl.compile import CompileUnit, compile_units

    units = [CompileUnit(k.entry, k.source, (k.entry,), k.options)
             for band, tuning, _name in runs for k in render(loaded, pipeline, binding, band, arch, tuning)[1]]
    compile_units(units, arch)


class Built:
    """One case rendered with one template, compiled, loaded and bound to device buffers."""

    def __init__(self, loaded, pipeline, binding, host: dict, row_band: bool, arch: str, tuning: dict | None = None):
        import cupy

        from cuvil_dsl.compile import CompileUnit, compile_units
        from cuvil_dsl.reference.executor import eval_op
        from cuvil_dsl.runtime.device import max_dynamic_shared_bytes
        from cuvil_dsl.runtime.modules import ArgumentCells, load_kernels
        from cuvil_dsl.types import DType, concrete_shape

        sizes = binding.sizes
        tuning = dict(tuning or {})
        patch = tuning.pop("source_patch", None)  # a probe's edit of the rendered source (pdl_filler.py)
        plan, rendered = render(loaded, pipeline, binding, row_band, arch, tuning)
        if patch is not None:
            from dataclasses import replace

            rendered = [replace(k, source=patch(k.source)) for k in rendered]
        units = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options) for k in rendered], arch)
        self.pipeline, self.dtypes = pipeline, {}

        def device(a, dtype):
            if dtype is DType.BF16:
                return cupy.asarray(a.view(np.uint16))
            if dtype is DType.BOOL:
                return cupy.asarray(a.astype(np.uint8))
            return cupy.asarray(a)

        def poisoned(shape, dtype):
            if dtype in (DType.F16, DType.F32, DType.F64):
                return cupy.full(shape, np.nan, dtype=dtype.numpy)
            storage = {DType.BF16: np.uint16, DType.BOOL: np.uint8, DType.I32: np.int32}[dtype]
            return cupy.full(shape, np.iinfo(storage).max, dtype=storage)

        self.buffers, self.poison = {}, poisoned
        for b in plan.buffers:
            self.dtypes[b.name] = b.type.dtype
            self.buffers[b.name] = (device(host[b.name], b.type.dtype) if b.role == "input"
                                    else poisoned(concrete_shape(b.type.shape, sizes), b.type.dtype))
        env = dict(binding.params)
        for op in plan.host_ops:
            env[op.out] = eval_op(op, env)
        # launched as the executor launches (argument cells, prebuilt parameter arrays): kernels may
        # take TMA descriptors by value, which CuPy's kernel call cannot pass
        self.cells = ArgumentCells()
        for name, array in self.buffers.items():
            self.cells.set_pointer(name, array.data.ptr)
        loaded_kernels = load_kernels(rendered, units, self.cells, max_dynamic_shared_bytes())
        self.cells.set_uniforms(env)
        by_name = {k.name: (k, u) for k, u in zip(rendered, units)}
        self.launches, self.resources = [], []
        for fused in plan.kernels:
            kernel, unit = by_name[fused.name]
            timed = fused.kind == "matmul_softmax"
            self.launches.append((loaded_kernels[kernel.name], timed))
            if timed:
                r = unit.resources[kernel.entry]
                self.resources.append(f"{kernel.name}: {r.registers} regs, {r.spill_bytes} B spilled, "
                                      f"{kernel.shared_bytes} B smem, grid {kernel.grid[0]} x {kernel.block[0]}")

    def repoison(self) -> None:
        """Every result buffer poisoned again (NaN, or the largest integer), as before the first run."""
        for r in self.pipeline.results:
            buf = self.buffers[r.name]
            buf[...] = self.poison(buf.shape, self.dtypes[r.name])

    def run(self, only_timed: bool = False) -> None:
        import cupy

        stream = cupy.cuda.get_current_stream().ptr
        for kernel, timed in self.launches:
            if timed or not only_timed:
                kernel.launch(stream)

    def results(self) -> dict[str, np.ndarray]:
        import cupy

        from cuvil_dsl.types import DType

        cupy.cuda.runtime.deviceSynchronize()
        out = {}
        for r in self.pipeline.results:
            data = cupy.asnumpy(self.buffers[r.name])
            dtype = self.dtypes[r.name]
            out[r.name] = data.view(dtype.numpy) if dtype is DType.BF16 else data.astype(bool) if dtype is DType.BOOL else data
        return out

    def time_us(self, timer) -> float:
        """Median device time of the timed kernels (``bench.timing.GpuTimer``: L2 flushed and
        CUDA events around every sample, the queue kept full)."""
        import cupy

        self.run(only_timed=True)
        return timer.measure(lambda: self.run(only_timed=True), cupy.cuda.get_current_stream()).median_us


def timeline_summary(built: "Built", label: str, event_us: float) -> str:
    """The "timeline" ablation's notes (16 u64 a CTA at the output's start: %globaltimer at start, set up,
    round 0 done, loop done, last write done, exit; the SM; the rounds; thread 0's loads issued; past the
    block barrier), summarised in microseconds."""
    import cupy

    (name,) = [r.name for r in built.pipeline.results]
    raw = cupy.asnumpy(built.buffers[name]).reshape(-1).view(np.uint64)
    notes = raw[: raw.size // 16 * 16].reshape(-1, 16)[:1024]
    ok = (notes[:, 7] < 1 << 20) & (notes[:, 0] > 0) & (notes[:, 5] >= notes[:, 0])
    notes = notes[: np.argmin(ok) if not ok.all() else len(ok)].astype(np.int64)
    if not len(notes):
        return f"- {label}, timeline: no notes found"
    t = (notes[:, [0, 1, 2, 3, 4, 5, 8, 9]] - notes[:, 0].min()) / 1000.0  # us from the first CTA's start

    def spread(col: np.ndarray) -> str:
        return f"{np.median(col):.2f} [{col.min():.2f}, {col.max():.2f}]"

    return (f"- {label}, timeline of the last timed launch ({len(notes)} CTAs on {len(set(notes[:, 6]))} SMs, "
            f"{notes[:, 7].min()}-{notes[:, 7].max()} rounds; us, median [min, max]; CUDA events {event_us:.1f}): "
            f"start {spread(t[:, 0])}; loads issued {spread(t[:, 6] - t[:, 0])}; block barrier {spread(t[:, 7] - t[:, 6])}; "
            f"cluster barrier {spread(t[:, 1] - t[:, 7])}; set up {spread(t[:, 1] - t[:, 0])}; round 0 {spread(t[:, 2] - t[:, 1])}; "
            f"loop ends {spread(t[:, 3])}; last write {spread(t[:, 4] - t[:, 3])}; "
            f"to exit (the exit barrier, when EXIT_SYNC) {spread(t[:, 5] - t[:, 4])}; "
            f"exit {spread(t[:, 5])}; span {t[:, 5].max():.2f}")


def reference(pipeline, host: dict, params: dict, batch: int) -> tuple[dict, int | None]:
    """The float64 results; for more than 4 batch entries only the first 2 (rank-3 inputs sliced)."""
    from cuvil_dsl.reference import execute

    if batch <= 4:
        return execute(pipeline, host, params), None
    sliced = {n: (a[:2] if a.ndim == 3 and a.shape[0] == batch else a) for n, a in host.items()}
    return execute(pipeline, sliced, params), 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--no-variants", action="store_true",
                        help="skip VARIANTS (row band and generic, and CHECKED_VARIANTS, still run)")
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="only the CHECKED_VARIANTS whose name contains TEXT (repeatable), and the default kernel "
                             "again as a variant after them (the noise between identical rows)")
    parser.add_argument("--ablations", action="store_true",
                        help="also time ABLATIONS on attention_f16 (timing only: their results are wrong by design)")
    parser.add_argument("--ablation", action="append", metavar="TEXT",
                        help="with --ablations: only the ABLATIONS whose name contains TEXT (repeatable)")
    parser.add_argument("--sweep", action="store_true",
                        help="also time the default and each engine of the band on attention_f16 at SWEEP's sizes")
    parser.add_argument("--small", action="store_true",
                        help="also time the default and fewer column tiles a CTA on attention_f16 at SMALL's sizes")
    parser.add_argument("--batches", metavar="B,B,...",
                        help="also time the default kernel on attention_f16 [B, 2048, 2048] for each B (its time "
                             "against its rounds of bands: the fixed cost of a launch)")
    parser.add_argument("--first", metavar="SPEC",
                        help="time the variants and ablations on this spec instead of attention_f16 (e.g. "
                             "benchmarks/shapes/attention_f16-d128.yaml); the other cases still check them")
    parser.add_argument("--no-flush", action="store_true",
                        help="time back to back (no L2 flush before a sample), as `cuvil-dsl run` replays: with the "
                             "timeline ablation, where the bench's extra time goes (benchmarks/flush_probe.py)")
    args = parser.parse_args(argv)
    samples = max(50, args.samples)
    batches = [(int(b), 2048, 2048) for b in args.batches.split(",")] if args.batches else []
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        from cuvil_dsl.runtime.device import device_arch

        arch = device_arch()
    except Exception as exc:  # no CuPy, no driver, no device
        print(f"ab_attention: no GPU to run on ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    clock = CudaClock()
    if args.no_flush:
        clock.flush = lambda stream: None
    timer = GpuTimer(clock, Settings(budget_s=0.02, min_samples=samples, max_samples=max(samples, 200)))
    rows, notes, ok_all, variant_rows, sweep_rows, small_rows = [], [], True, [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        extra = (sweep_cases(Path(tmp)) if args.sweep else []) + (sweep_cases(Path(tmp), batches, "batch") if batches else [])
        extra += sweep_cases(Path(tmp), SMALL, "small") if args.small else []
        listed = cases(Path(tmp))
        if args.first:
            listed[0] = (Path(args.first).stem, Path(args.first).resolve())
        for label, path in listed + extra:
            sweep = label.startswith(("sweep", "batch", "small"))
            loaded, pipeline, binding = load(path)
            host = fresh_inputs(binding, pipeline, seed=int(time.time()) & 0xFFFF)
            batch = next((a.shape[0] for a in host.values() if a.ndim == 3), 1)
            want, first = reference(pipeline, host, binding.params, batch)
            timing, errors = {}, {}
            runs = [(True, None, "row band"), (False, None, "generic")]
            if not rows and not args.no_variants:  # the first case: every variant too
                runs += [(True, tuning, name) for name, tuning in VARIANTS]
            checked = CHECKED_VARIANTS
            if args.only:
                checked = [(name, tuning) for name, tuning in CHECKED_VARIANTS if any(o in name for o in args.only)]
                checked.append(("the default again", {}))
            runs += [(True, tuning, name) for name, tuning in checked]
            if not rows and args.ablations:
                runs += [(True, tuning, name) for name, tuning in ABLATIONS
                         if not args.ablation or any(a in name for a in args.ablation)]
            if sweep:  # the default and each engine (only the default in a batch scan)
                runs = [(True, None, "row band"),
                        *((True, tuning, name) for name, tuning in SWEEP_RUNS if label.startswith("sweep")),
                        *((True, tuning, name) for name, tuning in SMALL_RUNS if label.startswith("small"))]
            prewarm(loaded, pipeline, binding, runs, arch)
            for band, tuning, name in runs:
                built = Built(loaded, pipeline, binding, host, band, arch, tuning)
                ablation = tuning in [t for _, t in ABLATIONS]

                def check(built: Built, when: str) -> float:  # the results against the reference; the worst error
                    nonlocal ok_all
                    got, worst = built.results(), 0.0
                    for r in pipeline.results:
                        rtol, atol = loaded.spec.check.tolerances(r.type.dtype, loaded.spec.target.tf32)
                        g = got[r.name][:first] if first else got[r.name]
                        good, err = matches(g, want[r.name], rtol, atol)
                        worst = max(worst, err)
                        if not good and ablation:
                            notes.append(f"- {label} ({name}): results differ, as an ablation's do")
                        elif not good:
                            ok_all = False
                            notes.append(f"- MISMATCH {label} ({name}) {r.name}{when}: "
                                         f"worst error {err:.3g} x tolerance")
                    return worst

                built.run()
                worst = check(built, "")
                key = band if tuning is None else name
                errors[key] = worst
                timing[key] = built.time_us(timer)
                if tuning and "timeline" in tuning.get("ablate", ()):
                    notes.append(timeline_summary(built, label, timing[key]))
                if not ablation:  # a launch after hundreds: no state left behind by earlier launches
                    built.repoison()
                    built.run()
                    errors[key] = max(worst, check(built, " (after the timed launches)"))
                    worst = errors[key]
                notes.append(f"- {label}, {name}: {timing[key]:.1f} us, error {worst:.3f}; " + "; ".join(built.resources))
                if tuning is not None and not rows:
                    variant_rows.append((name, tuning, timing[key], worst, "; ".join(built.resources)))
                del built
            if sweep and label.startswith("small"):
                small_rows.append((label, timing[True], *(timing.get(name, float("nan")) for name, _ in SMALL_RUNS)))
                continue
            if sweep:
                sweep_rows.append((label, timing[True], *(timing.get(name, float("nan")) for name, _ in SWEEP_RUNS)))
                continue
            rows.append((label, timing[True], timing[False], errors[True], errors[False]))
            print(f"{label}: row band {timing[True]:.1f} us, generic {timing[False]:.1f} us", file=sys.stderr)

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    lines = [f"# GEMM + softmax: row band vs generic template ({name}, {arch}, "
             f"{time.strftime('%Y-%m-%d')})", "",
             f"CUDA events around the GEMM + softmax kernel(s) only, L2 flushed, median of {samples}; "
             "error: the largest |got - want| as a fraction of the allowed tolerance (<= 1 passes).", "",
             "| case | row band (us) | generic (us) | generic / row band | error row band | error generic |",
             "|---|---|---|---|---|---|"]
    for label, new, old, e_new, e_old in rows:
        lines.append(f"| {label} | {new:.1f} | {old:.1f} | {old / new:.2f}x | {e_new:.3f} | {e_old:.3f} |")
    if variant_rows:
        label, default, generic = rows[0][0], rows[0][1], rows[0][2]
        lines += ["", f"Row-band variants on {label} (ROW_BAND_TUNING; default = {{}}):", "",
                  "| variant | tuning | us | vs default | vs generic | error | resources |", "|---|---|---|---|---|---|---|",
                  f"| default | {{}} | {default:.1f} | 1.00x | {generic / default:.2f}x | {rows[0][3]:.3f} | |"]
        for name, tuning, us, err, res in variant_rows:
            lines.append(f"| {name} | {tuning} | {us:.1f} | {default / us:.2f}x | {generic / us:.2f}x | {err:.3f} | {res} |")
    for title, runs, found in (("Engines of the row band at other sizes", SWEEP_RUNS, sweep_rows),
                               ("Small grids: the default against fewer column tiles a CTA", SMALL_RUNS, small_rows)):
        if found:
            lines += ["", f"{title} (attention_f16, D 64; us):", "",
                      "| case | default | " + " | ".join(name for name, _ in runs) + " |", "|---|---|" + "---|" * len(runs)]
            lines += [f"| {label} | " + " | ".join(f"{t:.1f}" if t == t else "-" for t in times) + " |"
                      for label, *times in found]
    lines += ["", *notes, "", f"total {time.perf_counter() - t0:.1f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["OUT"]) / "ab_attention.md").write_text(text)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
