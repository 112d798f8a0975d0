"""Fused attention: ``softmax(q @ k.T * c) @ v`` in one kernel, the probabilities never stored.

The planner makes an ``attention`` kernel of a GEMM, the elementwise work on its result, a row
softmax over its last axis (unnamed, read by nothing else) and a second ``@`` that multiplies
that softmax by a 16-bit tensor from memory (:meth:`~cuvil_dsl.passes.fusion._Planner._attention_misfit`).
This template runs it the way FlashAttention-2 does, on ``mma.sync.m16n8k16`` (sm_80 and newer):

* one block per BM query rows (16 a warp), batch index and chunk of at most 128 output columns
  (``Dv``), decoded from a 1-D grid; each warp owns 16 rows and every key column, so a row's
  statistics never leave the four lanes that hold it;
* the block's Q rows are loaded once (cp.async, zero-filled past M and Dk) and, for head
  dimensions up to 128, kept in registers as ldmatrix fragments;
* K and V stream through shared memory in tiles of BN keys, two stages of cp.async: tile t + 1
  loads while tile t computes. Shared rows are padded by 16 bytes, so ldmatrix reads them
  without bank conflicts; K is read K-major (``ldmatrix``) or N-major (``.trans``) as stored,
  V as stored (``.trans``);
* per tile: ``S = Q K^T`` into f32 accumulators, the fused elementwise work per element (scale,
  masks through ``where``, biases: any elementwise chain, masked to ``-inf`` past N), an online
  softmax (FlashAttention's rescaling: a row's running maximum ``m`` and sum ``l``; when ``m``
  grows, ``l`` and the output accumulators are multiplied by ``2^((m_old - m_new) log2 e)``),
  the numerators ``2^(s log2 e - m log2 e)`` (``ex2.approx``, relative error below 2^-21)
  rounded to the operands' 16-bit type and packed straight into A fragments (an m16n8 C
  fragment pair is an m16k16 A fragment), and ``O += P V``;
* at the end the four lanes of a row add their sums and ``O / l`` is stored.

On sm_90, where the operands suit it (:func:`wgmma_operands`: head dimension contiguous in q and k,
v's columns contiguous, Dk and Dv up to 128), :class:`_WgmmaAttention` runs the same data flow on
Hopper's ``wgmma.mma_async``: warpgroups of 64 query rows, Q and K from 128-byte-swizzled shared memory,
P from registers into the second product. Where every operand also loads by TMA and no block size was
asked for, :class:`_WsAttention` runs it warp-specialised, as FlashAttention-3 does: a producer warpgroup
loads by TMA through mbarriers, the consumer warpgroups overlap each tile's softmax with the previous
tile's second product.
``ATTENTION_TUNING`` holds the switches benchmarks/ab_attention_full.py times.

Precision: the numerators enter the tensor-core product rounded to f16/bf16 (relative 2^-11 /
2^-8 each, as in FlashAttention); the row sum adds them unrounded, in f32. NaN in a row makes
that row's output NaN; a row whose values are all ``-inf`` gives NaN (0 / 0), as NumPy does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

from cuvil_dsl.codegen import cuda_wgmma
from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.cuda_gemm import MMA_HELPERS, Operand, mma_helper, batch_offset, operand
from cuvil_dsl.codegen.cuda_lang import STORAGE
from cuvil_dsl.codegen.cuda_matmul import BAND_HELPERS, LOG2E
from cuvil_dsl.diagnostics import UserError, error
from cuvil_dsl.ir.nodes import ancestors
from cuvil_dsl.passes import configs
from cuvil_dsl.passes.indexing import operand_map
from cuvil_dsl.types import DType

THREADS = configs.ATTENTION_THREADS  # block sizes the template takes (16 query rows a warp)
KEY_TILES = (64, 32)  # BN, largest first: the first whose shared memory fits
MAX_DEPTH = configs.ATTENTION_MAX_DEPTH  # Dk the template holds (all of it in shared memory)
MAX_DV_CHUNK = 128  # output columns a block accumulates; wider Dv runs in chunks (S recomputed per chunk)
REGISTER_Q_DEPTH = 128  # Q fragments stay in registers up to this Dk, else ldmatrix from shared memory per tile
PAD = 8  # elements of padding a shared row (16 bytes)

# Tuning, for A/B runs (benchmarks/ab_attention_full.py); every key changes the generated source:
#   "rows": query rows a warp (16 or 32: two m16 tiles share each K and V fragment). Default 16.
#   "bn": keys a tile (64 or 128). Default 64; the wgmma kernel's default is 128 for head dimensions over 64.
#   "fold": when the softmax's argument is the unrounded GEMM value times a uniform (or the value itself)
#           and no key is masked (N a multiple of the tile): the row maximum is taken over the raw
#           accumulators (their minimum when the uniform is negative) and scaled once, and the exponent
#           is one FMA, ``acc * (u log2 e) - base``. Default True.
#   "lazy": the output accumulators are rescaled only when a row of the warp has a new maximum (a
#           warp-uniform branch); the sums always. Default False (measured slower: the vote costs more
#           than the multiplies it skips).
#   "wgmma": on sm_90 where the operands suit it (wgmma_operands), the Hopper kernel; False keeps
#           mma.sync. Default True.
#   "groups": consumer warpgroups a block of the wgmma kernel (64 query rows each). Default 2.
#   "overlap": the wgmma kernel issues S of the next tile and O += P V of this one together, and computes
#           the next tile's softmax while the second product runs (_WgmmaAttention.overlapped_loop; three
#           stages of K and V). Default False: measured slower (106.6 against 103.5 us at D 64, 111.8 against
#           103.4 at D 128; benchmarks/NOTES.md). In the warp-specialised kernel ("ws") the default is True
#           (95.7 against 102.9 us at D 64, 68.9 against 74.8 at D 128).
#   "ws": on sm_90, where every operand loads by TMA (tma_operands) and no block size was asked for, the
#           warp-specialised kernel (_WsAttention). Default True (D 64: 88.9 against 102.0 us; D 128: 69.2
#           against 91.0; benchmarks/NOTES.md, session 22).
#   "stages": K and V slots of the warp-specialised kernel. Default 2 (3 or 4 measured no faster); 3 with "skip":
#           "list" (2-3.5% faster on the causal benchmark).
#   "pingpong": the warp-specialised kernel's two consumer warpgroups take turns issuing their products
#           (FlashAttention-3's schedule). Default False: measured slower (99.5 against 95.7 us at D 64, 70.1
#           against 68.9 at D 128).
#   "persistent": the warp-specialised kernel on a grid of one block a multiprocessor (or of this many blocks),
#           each walking blocks of rows, the next one's Q and first tiles loading during the last one's end.
#           Default: where there are more blocks of rows than multiprocessors (D 128: 69.4 against 71.5 and 67.3
#           against 69.5 us in two calls; D 64: 88.8 against 88.9 and 88.2 against 88.2).
#   "chains": (max, sum): independent chains a row slot's tile maximum and numerator sum are computed in, each
#           over every chains-th 8-key column group, then combined (a thread's 2 x bn / 8 values of a row are one
#           dependent FMNMX chain and one FADD chain otherwise). More max chains give the same bits (fmaxf is
#           associative); more sum chains add in another order. Default (1, 1); (4, 1) in the warp-specialised
#           kernel with one consumer warpgroup (the example, [4, 256, 256]: 13.7 against 14.1 us; at the benchmarks'
#           shapes, with 2 or 4 consumers, every split measured level: benchmarks/NOTES.md, session 23).
#   "skip": the warp-specialised kernel (with "overlap", without "pingpong") skips a key tile whose every logit the
#           softmax's `where(c, x, f)` masks (c false over the consumer's 64 rows and the tile's keys) once each of
#           those rows holds a running maximum that puts 2^((f - max) log2 e) below f32's range: such a tile adds
#           exactly 0 to every sum and output, so the results are the same bits (unless V holds an infinity or NaN
#           under the masked keys, which 0 x inf would have made NaN; FlashAttention's causal kernels skip them
#           alike). True or "vote": a warpgroup-wide vote decides, "stages" + 1 tiles ahead (a row's maximum only
#           grows), and is published to the producer, which leaves a tile every warpgroup voted out unloaded.
#           "list" (with a separable mask, below, on a grid of one block a block of rows): before its loop each block
#           lists the key tiles some row of it sees (from the mask's row side's extreme over its rows and every key:
#           _WsAttention.listed_keys), and the producer and the consumers run the plain loop over those alone; each
#           consumer then checks that every tile left out would have added exactly 0 (its rows' maxima where the tile
#           would have come), and where one would not (a row masked whole) the block runs every tile again.
#           Default SKIP (see there).
#   "bare": with "list", a listed tile whose every element the mask passes (for ``<=``, its keys' largest value at
#           most the rows' smallest) is computed without the where: no mask loads. Default True. Where the where's
#           value is the GEMM value times a uniform, such a tile is also "fold"ed (see "fold"; _WsAttention.bare_fold:
#           causal [32, 2048, 2048], H100: 63.4 against 66.5 us, 63.9 against 65.5 in another call).
#   "trim": with "list" and more than one consumer warpgroup, each computes the listed tiles up to the last one
#           some row of its own sees and releases the rest unread. Default True.
#   "separable": with "skip", a mask that compares a key's value with a row's (``kpos <= qpos``) is tested a key at a
#           time against the warp's extreme row value (_WsAttention.separable_mask) instead of element by element.
#           Default True (not yet measured: session 29 built it after its device time ran out).
#   "order": a batch's blocks of rows in the grid, "ascending" or "descending" (the last first). Default "descending"
#           with "skip", on a grid of one block a block of rows (not persistent): a causal mask leaves the later
#           blocks of rows the most key tiles, and the block scheduler then runs a longest-first list schedule
#           (causal [32, 2048, 2048], 4 consumers: 131.7 against 154.9 us for the persistent ascending grid).
#   "unroll": the warp-specialised kernel's overlapped loop unrolled by its K and V slots, each copy of the body with
#           constant slots and barrier addresses and the round's phase (_WsAttention.rounds). Default "auto": where the
#           scores need no pass over their elements (the scale folds into the exponent), since a masked loop's copies
#           spill; True unrolls those too. D 64: 298 SASS instructions a warp and tile against 342, 85.8 against 89.8 us
#           on an H100 (benchmarks/NOTES.md, session 32). With "skip": "list", whose general body's copies spill,
#           "auto" and True take rounds of S bare, folded tiles alone, the other tiles one by one
#           (_WsAttention.listed_rounds): the causal benchmark 59.3 us against 61.3 rolled (H100, session 34).
#   "again": with "skip": "list", the second pass over every tile (run where a skip was inexact) "serial" (each product
#           waited for: no overlap, fewer registers, so the first pass's rounds fit) or "overlap". Default "serial"
#           (session 34: the rolled list's kernel 59.8 us against 61.3 with "overlap", H100).
#   "uniform": the consumer warpgroup's index read from lane 0, so the compiler knows it uniform and builds Q's wgmma
#           descriptors in uniform registers (no R2UR before each product; without it the unrolled D 64 kernel and
#           the causal one spill 64 bytes). Default True.
#   In the warp-specialised kernel "groups" (consumer warpgroups) defaults to the fastest by WS_BLOCK_US (4 for
#   the benchmark at D 64, 2 at D 128, 1 for the small example), and "bn" to 128 with 2 or 3 consumers, else 64.
ATTENTION_TUNING: dict = {}
# "skip"'s default: "list" (session 30). The vote (True, sessions 24-29) cost about what it saved: its loop (four
# bodies, a warpgroup barrier a tile, the mask check) took 131.7 us with 4 consumers and 112.9 with 2 on the causal
# benchmark [32, 2048, 2048], against 111.5-113.0 for the plain 4-consumer kernel (H100). The list runs the plain loop
# over the block's tiles: 66.1 us against 112.8 (1.71x), PyTorch SDPA 61.0, Triton 95.1 (H100, session 30; the same
# bits as without it in the GPU tests, 151 with SKIP "list"). Masks the list cannot take (not separable) keep the
# plain loop: the vote does not pay. benchmarks/NOTES.md, attention_full_f16, sessions 24-30.
SKIP = "list"
# "skip"'s modes: off; True or "vote" (each consumer warpgroup votes on a tile stages + 1 ahead); "list" (the block's
# tiles to compute, listed before its loop: _WsAttention.listed)
SKIP_MODES = (False, True, "vote", "list")
# "skip": "list" keeps a byte for every 32 keys and two for every key tile in shared memory
LIST_MAX_KEYS = 65536
# "skip": "list": K and V slots by default (see _WsAttention: a listed block computes fewer tiles)
LIST_STAGES = 3
# "skip": "list": an entry of the block's list of key tiles (16 bits, _WsAttention.listed_tiles): the tile in its low 14
# bits, LIST_GAP set where tiles were left out just before it, LIST_BARE where every element of it passes the mask
LIST_TILE, LIST_GAP, LIST_BARE = (1 << 14) - 1, 1 << 14, 1 << 15
# below this exponent a numerator is 0 (ex2.approx.ftz flushes 2^-126 and smaller): the skip's margin
SKIP_EXPONENT = -150.0
WG_ALL_HELPER = r"""
// true in every thread of warpgroup barrier `id`'s 128 threads when `c` is true in all of them. barrier.red, not
// bar.red: bar is the .aligned form, undefined (on the H200: a deadlock) when a warp arrives diverged, as a warp
// can after the waits' spin loops and the mask's bounds tests
__device__ __forceinline__ bool cvl_wg_all(bool c, unsigned id) {
    unsigned r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbarrier.red.and.pred q, %2, 128, p;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(r) : "r"((unsigned)c), "r"(id) : "memory");
    // the same in every lane, but ptxas cannot see that through the asm: lane 0's value by a shuffle is
    // warp-uniform to it, so a wgmma under a branch on the vote is not serialised (C7520)
    return __shfl_sync(0xffffffffu, r, 0) != 0;
}
// the producer's test for a key tile: every consumer warpgroup voted to skip it (so no copy into its slots)
__device__ __forceinline__ bool cvl_all_voted(const volatile unsigned char* votes, int groups) {
    bool all = true;
    for (int w = 0; w < groups; ++w) all = all && votes[w] != 0;
    return all;
}
"""

CONSUMERS_ANY_HELPER = r"""
// "skip": "list": true in every consumer thread when `c` is true in any of them (the `count` threads of named barrier
// 1; barrier.red, not bar.red: a warp may arrive diverged), as a warp-uniform value (see cvl_wg_all)
__device__ __forceinline__ bool cvl_consumers_any(bool c, unsigned count) {
    unsigned r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbarrier.red.or.pred q, 1, %2, p;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(r) : "r"((unsigned)c), "r"(count) : "memory");
    return __shfl_sync(0xffffffffu, r, 0) != 0;
}
"""

PACK = {DType.F16: ("__half2", "__floats2half2_rn"), DType.BF16: ("__nv_bfloat162", "__floats2bfloat162_rn")}

PACK_HELPER = r"""
template <typename T> __device__ __forceinline__ unsigned cvl_pack_bits(T v) {
    return *reinterpret_cast<unsigned*>(&v);  // a __half2 / __nv_bfloat162 as its 32 bits
}
"""


def round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def shared_bytes(bm: int, bn: int, depth: int, dv: int, k_major: bool) -> int:
    """Q rows, two stages of K and of V (16-bit, rows padded)."""
    q = bm * (depth + PAD)
    kt = bn * (depth + PAD) if k_major else depth * (bn + PAD)
    return 2 * (q + 2 * kt + 2 * bn * (dv + PAD))


def plan_tiles(threads: int, rows: int, depth: int, dv: int, k_major: bool, arch: str,
               key_tiles: tuple[int, ...] = KEY_TILES) -> tuple[int, int, int] | None:
    """(BM, BN, threads) that fit the arch's shared memory, ``rows`` query rows a warp: the asked threads
    first, then fewer; the first of ``key_tiles`` that fits."""
    for t in [threads] + [x for x in reversed(THREADS) if x < threads]:
        for bn in key_tiles:
            if shared_bytes(rows * (t // 32), bn, depth, dv, k_major) <= configs.smem_limit(arch):
                return rows * (t // 32), bn, t
    return None


class _Attention:
    order = "ascending"  # a batch's blocks of rows in the grid (see _WsAttention's "order")

    def __init__(self, k: CudaKernel):
        p = k.p
        self.k, self.p = k, p
        ops = list(p.ops.values())
        self.first = p.ops[k.kernel.anchor]
        self.softmax = next(op for op in ops if op.op == "softmax")
        self.second = ops[-1]
        assert self.second.op == "matmul" and self.second.args[0] == self.softmax.out, k.kernel.name
        self.q, self.kk, self.v = operand(k, self.first.out, 0), operand(k, self.first.out, 1), operand(k, self.second.out, 1)
        self.dtype: DType = self.q.dtype
        assert self.kk.dtype is self.dtype and self.v.dtype is self.dtype, (self.q, self.kk, self.v)
        self.M, self.N = p.domain[-2], p.domain[-1]
        self.batch = element_count(p.domain[:-2])
        self.depth = round_up(self.q.depth, 16)
        self.Dv = self.v.extent
        self.dv = min(round_up(self.Dv, 16), MAX_DV_CHUNK)
        self.chunks = -(-self.Dv // self.dv)
        self.out = self.second.out
        stores = [s for s in p.stores if s.value == self.out]
        assert len(p.stores) == 1 and stores, p.stores
        self.store = stores[0]
        tune = ATTENTION_TUNING
        self.mi = int(tune.get("rows", 16)) // 16  # m16 tiles a warp
        key_tiles = (int(tune["bn"]),) + KEY_TILES if "bn" in tune else KEY_TILES
        tiles = (plan_tiles(k.config.block, 16 * self.mi, self.depth, self.dv, self.kk.k_major, k.arch, key_tiles)
                 if self.depth <= MAX_DEPTH else None)
        if tiles is None:
            raise UserError([error(
                "E509", f"kernel `{k.kernel.name}`: attention with a head dimension of {self.q.depth} does not fit "
                f"one multiprocessor's shared memory on {k.arch} (the fused kernel holds up to {MAX_DEPTH})",
                k.kernel.span, hint="bind the softmax to a name, so the product runs as a kernel of its own")])
        self.bm, self.bn, self.threads = tiles
        self.ni = self.bn // 8  # n8 tiles of S a warp
        self.nd = self.dv // 8  # n8 tiles of O a warp
        self.ks = self.depth // 16
        self.q_regs = self.depth <= REGISTER_Q_DEPTH
        self.mt = -(-self.M // self.bm)
        self.nt = -(-self.N // self.bn)
        self.st = STORAGE[self.dtype]
        self.ldq = self.depth + PAD if self.q.k_major else self.bm + PAD
        self.ldk = self.depth + PAD if self.kk.k_major else self.bn + PAD
        self.ldv = self.dv + PAD
        self.q_elems = self.bm * self.ldq if self.q.k_major else self.depth * self.ldq
        self.k_elems = self.bn * self.ldk if self.kk.k_major else self.depth * self.ldk
        self.v_elems = self.bn * self.ldv
        self.fold = self.folded_scale() if tune.get("fold", True) else None
        self.lazy = bool(tune.get("lazy", False))
        self.chains = tuple(int(c) for c in tune.get("chains", (1, 1)))  # (max, sum) chains a row slot
        k.config = replace(k.config, block=self.threads)
        if "launch_bounds" not in k.config.overridden:
            k.config = replace(k.config, min_blocks=self.blocks_per_sm())

    def blocks_per_sm(self) -> int:
        """The launch bounds' resident blocks: 128 registers a thread when the accumulators (O and S), the
        Q fragments and about 40 more fit in them, else 255; fewer when shared memory holds fewer."""
        state = self.mi * (4 * (self.dv // 8) + 4 * (self.bn // 8) + (4 * (self.depth // 16) if self.q_regs else 0))
        regs = 128 if state + 40 <= 128 else 255
        by_smem = configs.smem_limit(self.k.arch) // shared_bytes(self.bm, self.bn, self.depth, self.dv, self.kk.k_major)
        return max(1, min(65536 // (self.threads * regs), by_smem))

    # ------------------------------------------------------------------ loads
    def copy(self, o: Operand, dst: str, ld: int, rows: int, cols: int, r0: str, c0: str, base: str,
             row_role: str) -> list[str]:
        """Copy a tile of ``o`` into shared ``dst`` (``rows`` x ``cols``, row pitch ``ld``): shared row r,
        column c holds the element at ``r0 + r`` along ``row_role`` ("mn" or "k") and ``c0 + c`` along the
        other; zero past the operand's extent or depth. 16-byte cp.async where the shared rows run along
        the stored contiguous axis and every chunk is aligned, else element by element."""
        k = self.k
        r_ext, c_ext = (o.extent, o.depth) if row_role == "mn" else (o.depth, o.extent)
        r_stride, c_stride = (o.stride_mn, o.stride_k) if row_role == "mn" else (o.stride_k, o.stride_mn)
        aligned = all(s % 8 == 0 for s in (r_stride, *(s for _d, s in o.batch)))
        vec = c_stride == 1 and c_ext % 8 == 0 and aligned
        width = 8 if vec else 1
        per_row = cols // width
        count = rows * per_row
        iters = -(-count // self.threads)
        # a tile starts inside the operand: its rows (columns) all are when the extent is a multiple of it
        tests = ([f"gr < {r_ext}"] if r_ext % rows else []) + ([f"gc < {c_ext}"] if c_ext % cols else [])
        body = [f"const int c = i * {self.threads} + threadIdx.x;",
                f"const int r = c / {per_row};", f"const int cc = c % {per_row} * {width};",
                f"const int gr = {r0} + r;", f"const int gc = {c0} + cc;",
                f"const bool ok = {' && '.join(tests) or 'true'};",
                f"{self.st}* d = {dst} + r * {ld} + cc;"]
        src = (f"{base} + ({k.index_t})gr * {k.stride_literal(r_stride)} + ({k.index_t})gc * "
               f"{k.stride_literal(c_stride)}")
        if vec:
            body.append(f"cvl_cp_async16(d, ok ? {src} : {base}, ok);")
        else:
            zero = "__ushort_as_half(0)" if self.dtype is DType.F16 else "__ushort_as_bfloat16(0)"
            body.append(f"*d = ok ? *({src}) : {zero};")
        if count % self.threads:
            body = [body[0], f"if (c < {count}) {{", *indent(body[1:]), "}"]
        # element copies are synchronous: unrolled a few at a time, so their loads overlap without
        # every address of the tile live at once
        return ["#pragma unroll" if vec else "#pragma unroll 4", f"for (int i = 0; i < {iters}; ++i) {{",
                *indent(body), "}"]

    def load_q(self) -> list[str]:
        q = self.q
        if q.k_major:
            return self.copy(q, "sq", self.ldq, self.bm, self.depth, "m0", "0", "pq", "mn")
        return self.copy(q, "sq", self.ldq, self.depth, self.bm, "0", "m0", "pq", "k")

    def load_kv(self, stage: str, tile: str) -> list[str]:
        kk, v = self.kk, self.v
        n0 = f"({tile}) * {self.bn}"
        sk, sv = f"sk + ({stage}) * {self.k_elems}", f"sv + ({stage}) * {self.v_elems}"
        if kk.k_major:
            lines = self.copy(kk, sk, self.ldk, self.bn, self.depth, n0, "0", "pk", "mn")
        else:
            lines = self.copy(kk, sk, self.ldk, self.depth, self.bn, "0", n0, "pk", "k")
        # V's shared tile: rows are keys (its K axis), columns this chunk's output columns
        return lines + self.copy(v, sv, self.ldv, self.bn, self.dv, n0, "d0", "pv", "k")

    # ------------------------------------------------------------------ fragments
    def q_fragment(self, mi: str, kq: str) -> tuple[str, str]:
        """(ldmatrix call, address) of the warp's Q fragment: m16 tile ``mi``, depth step ``kq``."""
        rows = f"wm + ({mi}) * 16"
        if self.q.k_major:
            return ("cvl_ldsm_x4",
                    f"sq + ({rows} + (lane / 8) % 2 * 8 + lane % 8) * {self.ldq} + ({kq}) * 16 + lane / 16 * 8")
        return ("cvl_ldsm_x4_trans",
                f"sq + (({kq}) * 16 + lane / 16 * 8 + lane % 8) * {self.ldq} + {rows} + (lane / 8) % 2 * 8")

    def k_fragments(self, tk: str, kq: str) -> list[str]:
        """``kf[ni][2]``: the B fragments of S's n8 tiles at depth step ``kq``, two per ldmatrix.x4."""
        if self.kk.k_major:
            call = "cvl_ldsm_x4"
            addr = f"{tk} + (nj * 16 + lane / 16 * 8 + lane % 8) * {self.ldk} + ({kq}) * 16 + (lane / 8) % 2 * 8"
        else:
            call = "cvl_ldsm_x4_trans"
            addr = f"{tk} + (({kq}) * 16 + (lane / 8) % 2 * 8 + lane % 8) * {self.ldk} + nj * 16 + lane / 16 * 8"
        return ["#pragma unroll", f"for (int nj = 0; nj < {self.ni // 2}; ++nj) {{",
                "    unsigned r[4];", f"    {call}(r, {addr});",
                "    kf[2 * nj][0] = r[0]; kf[2 * nj][1] = r[1];",
                "    kf[2 * nj + 1][0] = r[2]; kf[2 * nj + 1][1] = r[3];", "}"]

    # ------------------------------------------------------------------ per-element work
    def coord(self, d: int) -> str:
        rank = len(self.p.domain)
        return "m" if d == rank - 2 else "n" if d == rank - 1 else f"c{d}"

    def folded_scale(self, arg: str | None = None) -> str | None:
        """"fold" (see ATTENTION_TUNING): the uniform ``u`` when the softmax's argument (or value ``arg``) is
        ``GEMM * u`` ("" for the GEMM value itself), neither rounded, and no key is masked; else None."""
        if self.N % self.bn:
            return None
        ops = self.p.ops
        if rounds(self.first):
            return None
        arg = self.softmax.args[0] if arg is None else arg
        if arg == self.first.out:
            return ""
        op = ops.get(arg)
        if op is None or op.op != "mul" or rounds(op) or len(op.args) != 2 or self.first.out not in op.args:
            return None
        other = op.args[1] if op.args[0] == self.first.out else op.args[0]
        if other == self.first.out or other not in self.k.uniform_names or self.k.dtype(other) is DType.BOOL:
            return None
        return self.k.uniform_names[other]

    def logit(self, arg: str | None = None, amap=None) -> list[str]:
        """``s``: the softmax's argument at accumulator element ``ACC`` (row ``m``, key ``n``), -inf past N;
        rows past M too when the work reads memory (its loads stay in bounds). (Or value ``arg`` at map ``amap``
        in its place: see _WsAttention.bare.)"""
        k, lines = self.k, []
        ctype = k.lang.ctype(self.dtype)

        def anchor(value: str, m) -> str | None:
            if value != self.first.out:
                return None
            name = k.fresh()
            expr = k.lang.round("ACC", self.dtype) if rounds(self.first) else "ACC"
            lines.append(f"const {ctype} {name} = {expr};")
            return name

        w = k.walk(lines.append, self.coord, None, None, anchor)
        if arg is None:
            arg = self.softmax.args[0]
            amap = self.p.layout.maps[arg]
        x = w.value(arg, amap)
        gemm = lambda value, m: "acc" if value == self.first.out else None  # noqa: E731
        reads = any(value in k.names for value, _m in k.leaves([(arg, amap)], gemm))
        tests = ([f"m < {self.M}"] if self.M % self.bm and reads else []) + ([f"n < {self.N}"] if self.N % self.bn else [])
        neg_inf = k.lang.literal(-math.inf, DType.F32)
        if not tests:
            return [*lines, f"ACC = {x};"]
        return [f"if ({' && '.join(tests)}) {{", *indent([*lines, f"ACC = {x};"]), "} else {", f"    ACC = {neg_inf};", "}"]

    def s_elements(self, body: list[str]) -> list[str]:
        return ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
                "#pragma unroll", "for (int h = 0; h < 2; ++h)",
                "#pragma unroll", "for (int q = 0; q < 2; ++q) {",
                "    const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;",
                "    const int n = n0 + ni * 8 + lane % 4 * 2 + q;",
                "    (void)m; (void)n;",
                "    float& ACC = s[mi][ni][h * 2 + q];", *indent(body), "}"]

    def tile_max(self) -> list[str]:
        """``top[r]``: the tile's maximum of row slot r (slot ``mi * 2 + h``), of the softmax's argument."""
        neg_inf = self.k.lang.literal(-math.inf, DType.F32)
        slots = 2 * self.mi

        chains = min(self.chains[0], self.ni)

        def scan(combine: str, start: str) -> list[str]:
            """Every element into ``top`` (with one chain, from the caller's ``init``; else each chain from ``start``)."""
            if chains == 1:
                return ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                        "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
                        "#pragma unroll", "    for (int e = 0; e < 4; ++e)",
                        f"        top[mi * 2 + e / 2] = {combine}(top[mi * 2 + e / 2], s[mi][ni][e]);"]
            # chain c takes column groups ni = c, c + chains, ...: independent dependency chains, then combined
            return [f"float part[{slots}][{chains}];",
                    "#pragma unroll", f"for (int r = 0; r < {slots}; ++r)",
                    "#pragma unroll", f"    for (int c = 0; c < {chains}; ++c) part[r][c] = {start};",
                    "#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                    "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
                    "#pragma unroll", "    for (int e = 0; e < 4; ++e)",
                    f"        part[mi * 2 + e / 2][ni % {chains}] = {combine}(part[mi * 2 + e / 2][ni % {chains}], "
                    "s[mi][ni][e]);",
                    "#pragma unroll", f"for (int r = 0; r < {slots}; ++r) {{", "    top[r] = part[r][0];",
                    "#pragma unroll", f"    for (int c = 1; c < {chains}; ++c) top[r] = {combine}(top[r], part[r][c]);",
                    "}"]

        def init(start: str, pad: str = "") -> list[str]:  # one chain: top[] itself is the chain
            return [] if chains > 1 else ["#pragma unroll", f"{pad}for (int r = 0; r < {slots}; ++r) top[r] = {start};"]

        inf = self.k.lang.literal(math.inf, DType.F32)
        out = [f"float top[{slots}];"]
        if not self.fold:  # the argument itself ("" folds the GEMM value: its maximum is the argument's)
            return out + init(neg_inf) + scan("fmaxf", neg_inf)
        # max(acc * u) is u * max(acc) for u >= 0 and u * min(acc) for u < 0 (rounding is monotonic)
        return out + [
            "if (fold_flip) {", *init(inf, "    "), *indent(scan("fminf", inf)),
            "#pragma unroll", f"    for (int r = 0; r < {slots}; ++r) top[r] = -top[r];",
            "} else {", *init(neg_inf, "    "), *indent(scan("fmaxf", neg_inf)),
            "}",
            "#pragma unroll", f"for (int r = 0; r < {slots}; ++r) top[r] *= fold_abs;",
        ]

    def online_softmax(self) -> list[str]:
        """The tile's row maxima (the four lanes of a row together), the rescale of ``l`` and ``o``
        when a maximum grows, and the numerators in place of ``s``."""
        stats, rescale = self.softmax_parts()
        return [f"float alpha[{2 * self.mi}];", *stats, *rescale]

    def softmax_parts(self, factors: tuple[str, str] | None = None) -> tuple[list[str], list[str]]:
        """(the statistics and numerators: ``alpha[r]``, declared by the caller, set to each row slot's
        rescale factor; the rescale of ``o`` by it), apart so a wgmma in flight on ``o`` can overlap the first.
        With ``factors`` (the names of a tile's maximum scale and exponent factor), the tile maximum is scaled by the
        first and each exponent's argument is ``s * second - base``."""
        neg_inf = self.k.lang.literal(-math.inf, DType.F32)
        slots = 2 * self.mi
        rescale = ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                   "#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd)",
                   "#pragma unroll", "    for (int e = 0; e < 4; ++e) o[mi][nd][e] *= alpha[mi * 2 + e / 2];"]
        if self.lazy:  # most tiles raise no row's maximum: skip the multiplies by 1 (a warp-uniform branch)
            rescale = ["if (__any_sync(0xffffffffu, alpha[0] != 1.0f"
                       + "".join(f" || alpha[{r}] != 1.0f" for r in range(1, slots)) + ")) {", *indent(rescale), "}"]
        scale = "fold_c" if self.fold is not None else LOG2E
        if factors is not None:  # a tile's own (maximum scale, exponent factor), chosen at run time (listed_scores)
            scale = factors[1]
        stats = [
            *self.tile_max(),
            *(["#pragma unroll", f"for (int r = 0; r < {slots}; ++r) top[r] *= {factors[0]};"] if factors else []),
            f"float base[{slots}];",
            "#pragma unroll", f"for (int r = 0; r < {slots}; ++r) {{",
            "    top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));",
            "    top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));",
            "    top[r] = fmaxf(top[r], row_max[r]);",
            f"    const float bl = __fmul_rn(top[r], {LOG2E});",
            f"    base[r] = top[r] == {neg_inf} ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0",
            # the old sum and outputs are of 2^(x log2 e - old base): scale them to the new base
            "    alpha[r] = row_max[r] == top[r] ? 1.0f",
            f"             : row_max[r] == {neg_inf} ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet",
            "    row_max[r] = top[r];", "    row_base[r] = base[r];", "    row_sum[r] *= alpha[r];",
            "}",
            *self.numerators(scale),
        ]
        return stats, rescale

    def numerators(self, scale: str) -> list[str]:
        """Each logit's numerator in place of ``s``, added to its row slot's ``row_sum`` (in ``chains[1]``
        independent chains, combined into it after the tile)."""
        chains = min(self.chains[1], self.ni)
        exp = f"        s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], {scale}, -base[r]));"
        loop = ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
                "#pragma unroll", "    for (int e = 0; e < 4; ++e) {",
                "        const int r = mi * 2 + e / 2;", exp]
        if chains == 1:
            return [*loop, "        row_sum[r] += s[mi][ni][e];", "    }"]
        slots = 2 * self.mi
        return [f"float sums[{slots}][{chains}] = {{}};", *loop,
                f"        sums[r][ni % {chains}] += s[mi][ni][e];", "    }",
                "#pragma unroll", f"for (int r = 0; r < {slots}; ++r) {{", "    float t = sums[r][0];",
                "#pragma unroll", f"    for (int c = 1; c < {chains}; ++c) t += sums[r][c];", "    row_sum[r] += t;",
                "}"]

    def pv(self) -> list[str]:
        """``o += P V`` over the tile's keys: P's A fragments from the numerators (an m16n8 C fragment pair
        is an m16k16 A fragment), V's B fragments by ldmatrix.trans from the tile's stage (rows are keys),
        each serving the warp's m16 tiles."""
        pack = PACK[self.dtype][1]
        addr = f"tv + (j * 16 + (lane / 8) % 2 * 8 + lane % 8) * {self.ldv} + dj * 16 + lane / 16 * 8"
        return [
            "#pragma unroll", f"for (int j = 0; j < {self.ni // 2}; ++j) {{",
            f"    unsigned pf[{self.mi}][4];",
            "#pragma unroll", f"    for (int mi = 0; mi < {self.mi}; ++mi) {{",
            f"        pf[mi][0] = cvl_pack_bits({pack}(s[mi][2 * j][0], s[mi][2 * j][1]));",
            f"        pf[mi][1] = cvl_pack_bits({pack}(s[mi][2 * j][2], s[mi][2 * j][3]));",
            f"        pf[mi][2] = cvl_pack_bits({pack}(s[mi][2 * j + 1][0], s[mi][2 * j + 1][1]));",
            f"        pf[mi][3] = cvl_pack_bits({pack}(s[mi][2 * j + 1][2], s[mi][2 * j + 1][3]));",
            "    }",
            "#pragma unroll", f"    for (int dj = 0; dj < {self.nd // 2}; ++dj) {{",
            "        unsigned r[4];", f"        cvl_ldsm_x4_trans(r, {addr});",
            "        const unsigned b0[2] = {r[0], r[1]};", "        const unsigned b1[2] = {r[2], r[3]};",
            "#pragma unroll", f"        for (int mi = 0; mi < {self.mi}; ++mi) {{",
            "            cvl_mma(o[mi][2 * dj], pf[mi], b0);", "            cvl_mma(o[mi][2 * dj + 1], pf[mi], b1);",
            "        }",
            "    }", "}",
        ]

    def finish(self) -> list[str]:
        """The four lanes of a row add their sums; ``o / l`` stored (rows past M and columns past Dv
        skipped)."""
        k, store = self.k, self.store
        dtype = k.dtype(self.out)
        rank = len(self.p.domain)

        def coord(d: int) -> str:
            return "m" if d == rank - 2 else f"c{d}"

        row = k.offset(self.out, store.map, coord)
        guard = [f"m < {self.M}"] if self.M % self.bm else []
        out = [
            "#pragma unroll", f"for (int r = 0; r < {2 * self.mi}; ++r) {{",
            "    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);",
            "    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);",
            "    row_sum[r] = 1.0f / row_sum[r];  // 1 / 0 = inf: a row all -inf gives 0 * inf = NaN",
            "}",
            "#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
            "#pragma unroll", "for (int h = 0; h < 2; ++h) {",
            "    const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;",
            "    const float inv = row_sum[mi * 2 + h];",
        ]
        inner = ["const int d = d0 + nd * 8 + lane % 4 * 2;"]
        if dtype in PACK and self.Dv % 2 == 0:
            pair, pack = PACK[dtype]
            target = f"reinterpret_cast<{pair}*>({k.names[self.out]} + ({row}) + d)"
            inner.append(f"{'if (d < ' + str(self.Dv) + ') ' if self.Dv % self.dv else ''}*{target} = "
                         f"{pack}(o[mi][nd][h * 2] * inv, o[mi][nd][h * 2 + 1] * inv);")
        else:
            for q in range(2):
                value = f"o[mi][nd][h * 2 + {q}] * inv"
                line = f"{k.names[self.out]}[({row}) + d + {q}] = {k.lang.store(value, dtype)};"
                inner.append(f"if (d + {q} < {self.Dv}) {line}" if (self.Dv % self.dv or self.Dv % 2) else line)
        loop = ["#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd) {{", *indent(inner), "}"]
        if guard:
            loop = [f"if ({' && '.join(guard)}) {{", *indent(loop), "}"]
        return out + indent(loop) + ["}"]

    # ------------------------------------------------------------------ the kernel
    def decode(self, index: str = "blockIdx.x") -> list[str]:
        """The block's row tile ``mt``, output chunk ``dz`` (when Dv takes more than one) and batch index
        ``bz`` with its coordinates ``c{d}``, from the 1-D grid (or the work item ``index``)."""
        batch_shape = self.p.domain[:-2]
        if self.order == "descending":  # the last block of rows of every batch first, then the one before ...
            out = [f"const int mt = {self.mt - 1} - {index} / {self.batch * self.chunks};",
                   *([f"const int dz = {index} % {self.chunks};"] if self.chunks > 1 else []),
                   f"const int bz = {index} % {self.batch * self.chunks}" + (f" / {self.chunks};" if self.chunks > 1 else ";")]
        elif self.chunks > 1:
            out = [f"const int mt = {index} % {self.mt};", f"const int dz = {index} / {self.mt} % {self.chunks};",
                   f"const int bz = {index} / {self.mt * self.chunks};"]
        else:
            out = [f"const int mt = {index} % {self.mt};", f"const int bz = {index} / {self.mt};"]
        inner = 1
        for d in reversed(range(len(batch_shape))):
            div = f"bz / {inner}" if inner > 1 else "bz"
            out.append(f"const int c{d} = ({div}) % {batch_shape[d]};")
            inner *= batch_shape[d]
        return out + ["(void)bz;"]

    def fold_constants(self, fold: str | None = None) -> list[str]:
        """With "fold" (or the uniform ``fold``, "" for 1): the exponent's factor ``u log2 e``, ``|u|`` and the sign
        test (see tile_max)."""
        fold = self.fold if fold is None else fold
        if fold is None:
            return []
        u = fold or "1.0f"
        return [f"const float fold_c = {u} * {LOG2E};  // exp(acc * u) = 2^(acc * fold_c)",
                f"const float fold_abs = fabsf({u});", f"const bool fold_flip = {u} < 0.0f;"]

    def render(self, entry: str) -> Emitted:
        k = self.k
        st, mi = self.st, self.mi
        decode = self.decode()
        neg_inf = k.lang.literal(-math.inf, DType.F32)
        body = [
            "extern __shared__ __align__(16) unsigned char cvl_smem[];",
            f"{st}* const sq = reinterpret_cast<{st}*>(cvl_smem);  // the block's Q rows",
            f"{st}* const sk = sq + {self.q_elems};  // two stages of K",
            f"{st}* const sv = sk + {2 * self.k_elems};  // two stages of V",
            "const int lane = threadIdx.x % 32;",
            f"const int wm = threadIdx.x / 32 * {16 * mi};  // this warp's rows of the block",
            *decode,
            f"const int m0 = mt * {self.bm};",
            f"const int d0 = dz * {self.dv};" if self.chunks > 1 else "const int d0 = 0;",
            f"const {st}* pq = {self.q.pointer} + {batch_offset(k, self.q)};",
            f"const {st}* pk = {self.kk.pointer} + {batch_offset(k, self.kk)};",
            f"const {st}* pv = {self.v.pointer} + {batch_offset(k, self.v)};",
            f"float o[{mi}][{self.nd}][4];",
            "#pragma unroll", f"for (int mi = 0; mi < {mi}; ++mi)",
            "#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) o[mi][nd][e] = 0.0f;",
            f"float row_max[{2 * mi}], row_base[{2 * mi}], row_sum[{2 * mi}];",
            "#pragma unroll", f"for (int r = 0; r < {2 * mi}; ++r) {{",
            f"    row_max[r] = {neg_inf};", "    row_base[r] = 0.0f;", "    row_sum[r] = 0.0f;", "}",
        ]
        body += self.fold_constants()
        body += [*self.load_q(), *self.load_kv("0", "0"), "cvl_cp_commit();"]
        load_a, a_addr = self.q_fragment("mi", "kq")
        if self.q_regs:
            body += [f"unsigned qf[{mi}][{self.ks}][4];  // the warp's Q rows, all of Dk",
                     "cvl_cp_wait<0>();", "__syncthreads();",
                     "#pragma unroll", f"for (int mi = 0; mi < {mi}; ++mi)",
                     "#pragma unroll", f"    for (int kq = 0; kq < {self.ks}; ++kq) {load_a}(qf[mi][kq], {a_addr});"]
        gemm = ["#pragma unroll", f"for (int kq = 0; kq < {self.ks}; ++kq) {{",
                f"    unsigned kf[{self.ni}][2];", *indent(self.k_fragments("tk", "kq"))]
        if self.q_regs:
            gemm += ["#pragma unroll", f"    for (int mi = 0; mi < {mi}; ++mi)",
                     "#pragma unroll", f"        for (int ni = 0; ni < {self.ni}; ++ni) cvl_mma(s[mi][ni], qf[mi][kq], kf[ni]);",
                     "}"]
        else:
            gemm += ["#pragma unroll", f"    for (int mi = 0; mi < {mi}; ++mi) {{",
                     "        unsigned af[4];", f"        {load_a}(af, {a_addr});",
                     "#pragma unroll", f"        for (int ni = 0; ni < {self.ni}; ++ni) cvl_mma(s[mi][ni], af, kf[ni]);",
                     "    }", "}"]
        loop = [
            "cvl_cp_wait<0>();", "__syncthreads();  // tile t is in, and every warp is done with tile t - 1",
            f"if (t + 1 < {self.nt}) {{", *indent(self.load_kv("(t + 1) % 2", "t + 1")), "}", "cvl_cp_commit();",
            f"const {st}* tk = sk + (t % 2) * {self.k_elems};",
            f"const {st}* tv = sv + (t % 2) * {self.v_elems};",
            f"const int n0 = t * {self.bn};", "(void)n0;",
            f"float s[{mi}][{self.ni}][4];",
            "#pragma unroll", f"for (int mi = 0; mi < {mi}; ++mi)",
            "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) s[mi][ni][e] = 0.0f;",
            *gemm,
            *([] if self.fold is not None else self.s_elements(self.logit())),
            *self.online_softmax(),
            *self.pv(),
        ]
        body += [f"for (int t = 0; t < {self.nt}; ++t) {{", *indent(loop), "}", *self.finish()]
        lines = [*k.signature(entry, self.threads), *indent(body), "}"]
        shared = 2 * (self.q_elems + 2 * self.k_elems + 2 * self.v_elems)
        grid = self.batch * self.chunks * self.mt
        helpers = MMA_HELPERS + mma_helper(self.dtype) + BAND_HELPERS + PACK_HELPER
        return Emitted(lines, (grid, 1, 1), (self.threads, 1, 1), shared, helpers)


def render(k: CudaKernel, entry: str) -> Emitted:
    asked = k.config.block if "block" in k.config.overridden else None
    if ATTENTION_TUNING.get("wgmma", True) and asked in (None, 128, 256) and wgmma_operands(k) is None:
        if (ATTENTION_TUNING.get("ws", True) and asked is None and "launch_bounds" not in k.config.overridden
                and tma_operands(k)):
            return _WsAttention(k).render(entry)
        return _WgmmaAttention(k).render(entry)
    return _Attention(k).render(entry)


WGMMA_DEPTHS = (64, 128)  # Dk and Dv (padded to these) the wgmma kernel takes


def wgmma_operands(k: CudaKernel) -> str | None:
    """None when the wgmma kernel can run this attention on ``k``'s target, else why not: sm_90, 16-bit
    operands with 16-byte aligned rows, q and k K-major (head dimension contiguous), v stored with its
    columns contiguous, Dk and Dv at most 128."""
    if k.arch not in cuda_wgmma.WGMMA_ARCHS or not cuda_wgmma.WGMMA:
        return f"wgmma needs sm_90, not {k.arch}"
    ops = list(k.p.ops.values())
    first, second = k.p.ops[k.kernel.anchor], ops[-1]
    q, kk, v = operand(k, first.out, 0), operand(k, first.out, 1), operand(k, second.out, 1)
    if q.dtype not in (DType.F16, DType.BF16):
        return "wgmma attention: f16/bf16 only"
    if not (q.k_major and kk.k_major) or q.stride_k != 1 or kk.stride_k != 1 or v.stride_mn != 1:
        return "wgmma attention: q and k with the head dimension contiguous, v with its columns contiguous"
    for o, contiguous, other in ((q, q.depth, q.stride_mn), (kk, kk.depth, kk.stride_mn), (v, v.extent, v.stride_k)):
        if contiguous % 8 or other % 8 or any(s % 8 for _d, s in o.batch):
            return "wgmma attention: operand rows are not 16-byte aligned"
    if q.depth > WGMMA_DEPTHS[-1] or v.extent > WGMMA_DEPTHS[-1]:
        return f"wgmma attention: Dk and Dv of at most {WGMMA_DEPTHS[-1]}"
    return None


def tma_operands(k: CudaKernel) -> bool:
    """Whether q, k and v each load by TMA: their batch axes fold into one dimension of a map
    (:func:`cuda_wgmma.batch_view`)."""
    ops = list(k.p.ops.values())
    first, second = k.p.ops[k.kernel.anchor], ops[-1]
    return all(cuda_wgmma.batch_view(o, k.p.domain) is not None
               for o in (operand(k, first.out, 0), operand(k, first.out, 1), operand(k, second.out, 1)))


class _WgmmaAttention(_Attention):
    """The attention kernel on Hopper's ``wgmma.mma_async`` (sm_90a), FlashAttention-3's data flow
    without its warp specialisation: each consumer warpgroup owns 64 query rows; ``S = Q K^T`` is one
    ``m64n{BN}k16`` per 16 of Dk with Q and K from shared memory (128-byte swizzled, as
    :mod:`~cuvil_dsl.codegen.cuda_wgmma` lays operands out), the online softmax runs on S's
    accumulators (per warp the m16n8 layout of mma.sync), and ``O += P V`` is one ``m64n{Dv}k16`` per 16
    keys with P straight from registers (an m16n8 accumulator pair is the A fragment of 16 keys) and V
    from shared memory, MN-major (``trans-b``). K and V stream through two cp.async stages as in the
    mma.sync kernel; the two warpgroups of a block interleave their softmax and their tensor-core work."""

    def __init__(self, k: CudaKernel):
        tune = ATTENTION_TUNING
        asked = k.config.block if "block" in k.config.overridden else None
        groups = asked // 128 if asked else int(tune.get("groups", 2))
        super().__init__(k)
        # the base chose tiles for mma.sync; the wgmma kernel's own
        self.mi = 1
        self.depth = 64 * -(-self.q.depth // 64)
        # 128-key tiles for a head dimension of 128 (90.2 against 103.4 us), 64 for 64 (103.5 against 126.0;
        # benchmarks/NOTES.md, attention_full_f16)
        bn = int(tune.get("bn", 128 if self.depth > 64 else 64))
        self.bm, self.bn, self.threads = 64 * groups, bn, 128 * groups
        self.dv = 64 * -(-self.Dv // 64)
        self.chunks = 1
        self.ni, self.nd, self.ks = self.bn // 8, self.dv // 8, self.depth // 16
        self.mt = -(-self.M // self.bm)
        self.nt = -(-self.N // self.bn)
        self.q_bytes = self.bm * self.depth * 2
        self.k_bytes = self.bn * self.depth * 2
        self.v_bytes = self.bn * self.dv * 2
        self.fold = self.folded_scale() if tune.get("fold", True) else None
        self.overlap = bool(tune.get("overlap", False))
        self.stages = 3 if self.overlap else 2
        shared = self.shared_total()
        if shared > configs.smem_limit(k.arch):
            raise UserError([error("E509", f"kernel `{k.kernel.name}`: the attention tiles need {shared} bytes of "
                                   f"shared memory, more than {k.arch} has", k.kernel.span)])
        k.config = replace(k.config, block=self.threads)
        if "launch_bounds" not in k.config.overridden:
            regs = 128 if self.ni * 4 + self.nd * 4 + 40 <= 128 else 255
            per_sm = min(65536 // (self.threads * regs), configs.smem_limit(k.arch) // shared)
            k.config = replace(k.config, min_blocks=max(1, per_sm))

    def shared_total(self) -> int:
        return self.q_bytes + self.stages * (self.k_bytes + self.v_bytes) + 1024  # 1 KiB to align the base to 1024

    # ------------------------------------------------------------------ loads (128-byte swizzle)
    def swizzled_copy(self, dst: str, rows: int, cols: int, r0: str, c0: str, base: str, r_ext: int, c_ext: int,
                      r_stride: int) -> list[str]:
        """cp.async of a ``rows`` x ``cols`` tile (16-byte chunks of 8 along the contiguous axis) into the
        swizzled layout: K-major, chunk (r, c) at ``(c / 8) * rows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16``
        (atoms of 64 columns); MN-major the same with rows the K axis (atoms of 64 MN-elements x 8 rows)."""
        kx = self.k
        per_row = cols // 8
        count = rows * per_row
        iters = -(-count // self.threads)
        tests = ([f"gr < {r_ext}"] if r_ext % rows else []) + ([f"gc < {c_ext}"] if c_ext % cols else [])
        body = [f"const int c = i * {self.threads} + threadIdx.x;",
                f"const int r = c / {per_row};", f"const int j = c % {per_row};",
                f"const int gr = {r0} + r;", f"const int gc = {c0} + j * 8;",
                f"const bool ok = {' && '.join(tests) or 'true'};",
                f"const unsigned d = {dst} + (j >> 3) * {rows * 128} + r * 128 + (((j & 7) ^ (r & 7)) << 4);",
                f"cvl_cp_async16s(d, ok ? {base} + ({kx.index_t})gr * {kx.stride_literal(r_stride)} + gc : {base}, ok);"]
        if count % self.threads:
            body = [body[0], f"if (c < {count}) {{", *indent(body[1:]), "}"]
        return ["#pragma unroll", f"for (int i = 0; i < {iters}; ++i) {{", *indent(body), "}"]

    def load_q(self) -> list[str]:
        q = self.q
        return self.swizzled_copy("sq", self.bm, self.depth, "m0", "0", "pq", q.extent, q.depth, q.stride_mn)

    def load_kv(self, stage: str, tile: str) -> list[str]:
        kk, v = self.kk, self.v
        n0 = f"({tile}) * {self.bn}"
        return (self.swizzled_copy(f"sk + ({stage}) * {self.k_bytes}u", self.bn, self.depth, n0, "0", "pk",
                                   kk.extent, kk.depth, kk.stride_mn)
                + self.swizzled_copy(f"sv + ({stage}) * {self.v_bytes}u", self.bn, self.dv, n0, "0", "pv",
                                     v.depth, v.extent, v.stride_k))

    # ------------------------------------------------------------------ wgmma
    def wgmma_helpers(self) -> str:
        t = "f16" if self.dtype is DType.F16 else "bf16"

        def outs(tiles: int) -> str:
            return ", ".join(f'"+f"(d[{i // 4}][{i % 4}])' for i in range(tiles * 4))

        def regs(n: int, start: int = 0) -> str:
            return ", ".join(f"%{start + i}" for i in range(n))

        ns, nv = self.ni * 4, self.nd * 4
        return f"""
// S (64 x {self.bn}, f32) = or += Q (64 x 16, descriptor, K-major) * K^T (16 x {self.bn}, descriptor, K-major)
template <int ACCUMULATE>
__device__ __forceinline__ void cvl_wgmma_qk(float (&d)[{self.ni}][4], unsigned long long da, unsigned long long db) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{ns + 2}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n{self.bn}k16.f32.{t}.{t} {{{regs(ns)}}}, %{ns}, %{ns + 1}, p, 1, 1, 0, 0;\\n}}\\n"
                 : {outs(self.ni)}
                 : "l"(da), "l"(db), "n"(ACCUMULATE));
}}
// O (64 x {self.dv}, f32) += P (64 x 16, registers) * V (16 x {self.dv}, descriptor, MN-major: trans-b)
__device__ __forceinline__ void cvl_wgmma_pv(float (&d)[{self.nd}][4], const unsigned (&a)[4], unsigned long long db) {{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{self.dv}k16.f32.{t}.{t} {{{regs(nv)}}}, {{{regs(4, nv)}}}, %{nv + 4}, 1, 1, 1, 1;\\n"
                 : {outs(self.nd)}
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}}
// Pins registers that an asynchronous wgmma reads or writes: the compiler keeps them (and their values)
// up to this point, after the wait.
template <int N> __device__ __forceinline__ void cvl_pin(float (&d)[N][4]) {{
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e]) :: "memory");
}}
template <int N> __device__ __forceinline__ void cvl_pin(unsigned (&r)[N][4]) {{
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e]) :: "memory");
}}
"""

    def issue_scores(self, stage: str) -> list[str]:
        """The wgmma of S = Q K^T (tile in stage ``stage``) into ``s[0]``: the first 16 of Dk sets it
        (scale-d 0), the rest accumulate. Not committed."""
        lines = []
        for kq in range(self.ks):
            atom, kk = divmod(kq, 4)
            da = f"desc_q + ({atom * self.bm * 128 + kk * 32} >> 4)"
            db = f"desc_k + ((({stage}) * {self.k_bytes} + {atom * self.bn * 128 + kk * 32}) >> 4)"
            lines.append(f"cvl_wgmma_qk<{int(kq > 0)}>(s[0], {da}, {db});")
        return lines

    def pack(self) -> list[str]:
        """The numerators in ``s`` rounded into P's A fragments ``pf`` (an m16n8 accumulator pair is the
        A fragment of 16 keys)."""
        pack = PACK[self.dtype][1]
        return ["#pragma unroll", f"for (int j = 0; j < {self.ni // 2}; ++j) {{",
                f"    pf[j][0] = cvl_pack_bits({pack}(s[0][2 * j][0], s[0][2 * j][1]));",
                f"    pf[j][1] = cvl_pack_bits({pack}(s[0][2 * j][2], s[0][2 * j][3]));",
                f"    pf[j][2] = cvl_pack_bits({pack}(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));",
                f"    pf[j][3] = cvl_pack_bits({pack}(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));", "}"]

    def issue_pv(self, stage: str) -> list[str]:
        """The wgmma of O += P V (V's tile in stage ``stage``), one per 16 keys. Not committed."""
        return [f"cvl_wgmma_pv(o[0], pf[{j}], desc_v + ((({stage}) * {self.v_bytes} + {j * 16 * 128}) >> 4));"
                for j in range(self.ni // 2)]

    def scores_ready(self, tile: str) -> list[str]:
        """After S of ``tile`` retired: the fused work on it (unless the scale folds), the statistics and
        the numerators (``alpha`` set)."""
        stats, _ = self.softmax_parts()
        return [f"const int n0 = ({tile}) * {self.bn};", "(void)n0;",
                *([] if self.fold is not None else self.s_elements(self.logit())), *stats]

    def plain_loop(self) -> list[str]:
        """Per tile: wait for its loads, issue the next tile's, S, softmax, O += P V, each retired in turn
        (the other warpgroups of the SM fill the gaps)."""
        _, rescale = self.softmax_parts()
        loop = [
            "cvl_cp_wait<0>();", "cvl_fence_proxy_async();  // cp.async wrote through the generic proxy",
            "__syncthreads();  // tile t is in, and every warpgroup is done with tile t - 1",
            f"if (t + 1 < {self.nt}) {{", *indent(self.load_kv("(t + 1) % 2", "t + 1")), "}", "cvl_cp_commit();",
            "cvl_wgmma_fence();", *self.issue_scores("t % 2"),
            "cvl_wgmma_commit();", "cvl_wgmma_wait<0>();", "cvl_pin(s[0]);",
            "float alpha[2];", *self.scores_ready("t"), *rescale, *self.pack(),
            "cvl_wgmma_fence();", *self.issue_pv("t % 2"),
            "cvl_wgmma_commit();", "cvl_wgmma_wait<0>();", "cvl_pin(o[0]);", "cvl_pin(pf);",
        ]
        return [*self.load_q(), *self.load_kv("0", "0"), "cvl_cp_commit();",
                "#pragma unroll 1", f"for (int t = 0; t < {self.nt}; ++t) {{", *indent(loop), "}"]

    def overlapped_loop(self) -> list[str]:
        """"overlap": three stages; step t issues S of tile t + 1 and then O += P(t) V(t), and computes tile
        t + 1's statistics and numerators (the MUFU's work) while the second product runs on the tensor
        cores; then it rescales O and packs P(t + 1). Tile t + 2 loads meanwhile."""
        _, rescale = self.softmax_parts()
        nt = self.nt
        first = [*self.load_q(), *self.load_kv("0", "0"), "cvl_cp_commit();"]
        if nt > 1:
            first += [*self.load_kv("1", "1"), "cvl_cp_commit();", "cvl_cp_wait<1>();"]
        else:
            first += ["cvl_cp_wait<0>();"]
        first += ["cvl_fence_proxy_async();", "__syncthreads();",
                  "cvl_wgmma_fence();", *self.issue_scores("0"), "cvl_wgmma_commit();", "cvl_wgmma_wait<0>();",
                  "cvl_pin(s[0]);", *self.scores_ready("0"), *self.pack()]
        loop = [
            "cvl_cp_wait<0>();", "cvl_fence_proxy_async();",
            "__syncthreads();  // tile t + 1 is in, and every warpgroup has retired step t - 1's products",
            f"if (t + 2 < {nt}) {{", *indent(self.load_kv("(t + 2) % 3", "t + 2")), "}", "cvl_cp_commit();",
            "cvl_wgmma_fence();",
            f"if (t + 1 < {nt}) {{", *indent(self.issue_scores("(t + 1) % 3")), "}", "cvl_wgmma_commit();",
            *self.issue_pv("t % 3"), "cvl_wgmma_commit();",
            f"if (t + 1 < {nt}) {{",
            *indent(["cvl_wgmma_wait<1>();  // S of tile t + 1 (O += P V of tile t may still run)", "cvl_pin(s[0]);",
                     *self.scores_ready("t + 1")]),
            "}",
            "cvl_wgmma_wait<0>();", "cvl_pin(o[0]);", "cvl_pin(pf);",
            f"if (t + 1 < {nt}) {{", *indent([*rescale, *self.pack()]), "}",
        ]
        return [*first, "#pragma unroll 1", f"for (int t = 0; t < {nt}; ++t) {{", *indent(loop), "}"]

    def warpgroup_state(self, wg: str) -> list[str]:
        """The wgmma descriptors of warpgroup ``wg`` (the C expression of its index), its output accumulators
        (zero) and its rows' running statistics."""
        return [
            # descriptors: Q K-major (this warpgroup's 64 rows), K K-major, V MN-major (LBO: one 64-wide atom of Dv)
            f"const unsigned long long desc_q = cvl_wgmma_desc(sq + {wg} * 8192u, 16u, 1024u);",
            "const unsigned long long desc_k = cvl_wgmma_desc(sk, 16u, 1024u);",
            f"const unsigned long long desc_v = cvl_wgmma_desc(sv, {self.bn * 128}u, 1024u);",
            f"float o[1][{self.nd}][4];", *self.zero_outputs(), "float row_max[2], row_base[2], row_sum[2];",
            *self.zero_rows(),
        ]

    def zero_state(self) -> list[str]:
        """The output accumulators to zero, the rows' running statistics to their start (see warpgroup_state)."""
        return [*self.zero_outputs(), *self.zero_rows()]

    def zero_outputs(self) -> list[str]:
        return ["#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd)",
                "#pragma unroll", "    for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.0f;"]

    def zero_rows(self) -> list[str]:
        neg_inf = self.k.lang.literal(-math.inf, DType.F32)
        return [
            "#pragma unroll", "for (int r = 0; r < 2; ++r) {",
            f"    row_max[r] = {neg_inf};", "    row_base[r] = 0.0f;", "    row_sum[r] = 0.0f;", "}",
        ]

    # ------------------------------------------------------------------ the kernel
    def render(self, entry: str) -> Emitted:
        k = self.k
        st = self.st
        decode = self.decode()
        body = [
            "extern __shared__ __align__(1024) unsigned char cvl_smem[];",
            "const unsigned sq = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;  // the block's Q rows",
            f"const unsigned sk = sq + {self.q_bytes}u;  // {self.stages} stages of K",
            f"const unsigned sv = sk + {self.stages * self.k_bytes}u;  // {self.stages} stages of V",
            "const int lane = threadIdx.x % 32;",
            "const int wm = threadIdx.x / 128 * 64 + (threadIdx.x / 32) % 4 * 16;  // this warp's rows of the block",
            *decode,
            f"const int m0 = mt * {self.bm};",
            "const int d0 = 0;",
            f"const {st}* pq = {self.q.pointer} + {batch_offset(k, self.q)};",
            f"const {st}* pk = {self.kk.pointer} + {batch_offset(k, self.kk)};",
            f"const {st}* pv = {self.v.pointer} + {batch_offset(k, self.v)};",
            *self.warpgroup_state("threadIdx.x / 128"),
        ]
        body += self.fold_constants()
        body += [f"float s[1][{self.ni}][4];", f"unsigned pf[{self.ni // 2}][4];  // P's A fragments",
                 *(["float alpha[2];"] if self.overlap else []),
                 *(self.overlapped_loop() if self.overlap else self.plain_loop()), *self.finish()]
        lines = [*k.signature(entry, self.threads), *indent(body), "}"]
        grid = self.batch * self.mt
        helpers = cuda_wgmma.HELPERS + BAND_HELPERS + PACK_HELPER + self.wgmma_helpers()
        return Emitted(lines, (grid, 1, 1), (self.threads, 1, 1), self.shared_total(), helpers, (f"-arch={cuda_wgmma.ARCH}",))


WS_PRODUCER_REGS = 24  # setmaxnreg of the producer warpgroup (one thread issues every copy)
# A block's time (us) by consumer warpgroups, one block a multiprocessor, at 2048 keys: the benchmarks' full waves
# (benchmarks/NOTES.md, attention_full_f16, session 22: [32, 2048, 64] with 1, 2, 3 and 4 consumers took 170.9, 95.4,
# 92.6 and 88.9 us in 8, 4, 3 and 2 waves; [16, 2048, 128] with 1 and 2, 106.4 and 69.2 in 4 and 2 waves). Only
# the ratios matter: _WsAttention.fastest_groups picks the fewest waves times this. "narrow": Dk and Dv up to 64
# (4 consumers hold S, O and P of 64-key tiles in 112 registers); "wide": up to 128 (2 consumers of 240; 3
# have 160, too few for 128 columns of each).
WS_BLOCK_US = {"narrow": {1: 22.0, 2: 24.6, 3: 30.9, 4: 44.5}, "wide": {1: 26.6, 2: 34.5}}


class _WsAttention(_WgmmaAttention):
    """The wgmma kernel warp-specialised (FlashAttention-3's data flow): warpgroup 0 is the producer, one
    thread of it loading Q once and then K and V tile by tile by TMA (128-byte swizzle, zero fill past the
    operands' extents) into ``stages`` slots, each slot's K and V with a "full" mbarrier apiece (the
    copies' bytes complete it) and an "empty" one (one arrival per consumer warpgroup once the wgmma that
    read it retired); warpgroups 1..G are consumers of 64 query rows each, with no block-wide barrier in
    the loop, so each runs at its own pace. ``setmaxnreg`` moves the producer's registers to the
    consumers. With "overlap" (the default here) a consumer issues S of tile t and O += P(t - 1) V(t - 1)
    together and computes tile t's softmax while the second product runs.

    Taken (:func:`render`) with ATTENTION_TUNING "ws" when every operand's batch axes fold into one
    dimension of a TMA map (:func:`cuda_wgmma.batch_view`) and the spec sets neither the block size nor
    launch bounds (setmaxnreg's counts assume one block of exactly these threads a multiprocessor)."""

    def __init__(self, k: CudaKernel):
        tune = ATTENTION_TUNING
        super().__init__(k)
        groups = int(tune["groups"]) if "groups" in tune else self.fastest_groups(k.sm_count)
        self.groups = groups
        # one consumer alone (small grids) hides less of a row's FMNMX chain: the tile maximum in 4 chains
        # (the same bits) measured 13.7 against 14.1 us on the example; with more consumers level
        self.chains = tuple(int(c) for c in tune.get("chains", (4, 1) if groups == 1 else (1, 1)))
        self.overlap = bool(tune.get("overlap", True))
        self.stages = int(tune.get("stages", 2))
        self.pingpong = bool(tune.get("pingpong", False)) and self.overlap and groups == 2
        skip = tune.get("skip", SKIP)
        if skip not in SKIP_MODES:
            raise ValueError(f"ATTENTION_TUNING skip {skip!r}: one of {SKIP_MODES}")
        self.masked = self.masking_where() if skip and self.overlap and not self.pingpong else None
        self.separable = bool(tune.get("separable", True))  # "skip": a mask of positions tested by the rows' extreme
        # "skip": each warpgroup's vote on tile t + stages + 1, published for the producer before tile t + 1's K slot is
        # released; written again (tile t + ring) only once the producer has read it (see skip_vote)
        self.vote_ahead = self.stages + 1  # tile t votes on tile t + vote_ahead
        self.vote_ring = self.stages + 2
        self.bn = int(tune.get("bn", 128 if groups in (2, 3) else 64))
        self.bm = 64 * groups
        self.ni = self.bn // 8
        self.mt = -(-self.M // self.bm)
        self.nt = -(-self.N // self.bn)
        self.items = self.batch * self.mt  # blocks of rows: one a block, or walked by a persistent grid
        self.q_bytes = self.bm * self.depth * 2
        self.k_bytes = self.bn * self.depth * 2
        self.v_bytes = self.bn * self.dv * 2
        self.threads = 128 * (groups + 1)
        shared = self.shared_total()
        # "skip": "list": the block's key tiles some row of it sees unmasked, listed before the loop (a separable mask
        # of at most LIST_MAX_KEYS keys whose list fits in shared memory, one block of rows a block: not persistent);
        # another mask keeps the plain loop (the vote, True, does not pay)
        self.listed = (skip == "list" and self.masked is not None and self.listed_terms is not None
                       and self.N <= LIST_MAX_KEYS and self.nt <= LIST_TILE and not tune.get("persistent", False)
                       and shared + self.listed_bytes() <= configs.smem_limit(k.arch))
        if skip == "list" and not self.listed:
            self.masked = None
        # with "list" three K and V slots by default (causal [32, 2048, 2048], H100: 62.0 against 64.1 us and 60.4
        # against 62.2; the all-pass probe 98.4 against 100.9): a block computes fewer tiles, its pipeline's fill
        # weighs more. The unmasked kernel measured level with three (90.0 against 89.4).
        if self.listed and "stages" not in tune:
            self.stages = LIST_STAGES
            if self.shared_total() + self.listed_bytes() > configs.smem_limit(k.arch):
                self.stages = 2
            shared = self.shared_total()
        # "order": a batch's blocks of rows in the grid, "ascending" (by first row) or "descending". With "skip" a
        # causal mask leaves a later block of rows more key tiles to compute, so "descending" (the default there)
        # starts the longest first, and the GPU's block scheduler, handing each multiprocessor the next block as
        # its last ends, fills in with the short ones: a longest-first list schedule, which is why "skip" is not
        # persistent by default (a persistent block's fixed turn of items cannot even out).
        self.order = str(tune.get("order", "descending" if self.masked is not None else "ascending"))
        if self.order not in ("ascending", "descending"):
            raise ValueError(f"ATTENTION_TUNING order {self.order!r}: ascending or descending")
        # persistent where blocks hand over on a multiprocessor, i.e. past one wave (measured: D 128 -3%, D 64 level)
        persistent = tune.get("persistent", self.items > k.sm_count and self.masked is None)
        self.persistent = bool(persistent)
        self.blocks = k.sm_count if persistent is True else int(persistent)  # the persistent grid (tests: a few)
        # "bare": with "list", a tile whose every key passes the mask against every row of the block is listed as such
        # and computed without the where (its every element would take the where's value): no mask loads or compares
        self.bare = self.listed and bool(tune.get("bare", True))
        # "bare" with "fold": the uniform u when the where's value is GEMM * u ("" for the GEMM value), unrounded, and
        # no key is past N (folded_scale): a bare tile then folds u into its exponent (listed_scores)
        self.bare_fold = self.folded_scale(self.masked.args[1]) if self.bare and tune.get("fold", True) else None
        # "trim": with "list" and more than one consumer warpgroup, each computes the listed tiles up to the last that
        # some row of its own sees, and releases the rest unread
        self.trim = self.listed and groups > 1 and bool(tune.get("trim", True))
        # what a tile's use of the slots counts from (see use): with "persistent", the tiles of the block's earlier work
        # items (g), unless each item's tiles are a multiple of 2 x stages, so every item starts at slot 0, phase 0 (not
        # with "skip"'s vote: its ring of votes, of stages + 2 entries, counts on over the items)
        self.base = "g" if self.persistent and (self.nt % (2 * self.stages) or self.masked is not None) else None
        # "unroll": the overlapped loop over a work item's tiles unrolled by the slot count (overlapped_pass), so each copy
        # of its body reads constant slots and barrier addresses, and one division a round gives the barriers' phase
        # (benchmark, D 64: 298 SASS instructions a tile and warp against 342). Not with "list": its copies of the body
        # (the entry's flags, the bare and folded branches) spill 2.7-3 KB a thread at 4 consumers. By default ("auto")
        # only where the scores need no pass over their elements (the scale folds into the exponent): a masked loop's
        # copies spill 120-192 bytes at 4 consumers (causal benchmark with "skip" off). True unrolls those too.
        unroll = tune.get("unroll", "auto")
        if unroll not in (True, False, "auto"):
            raise ValueError(f"ATTENTION_TUNING unroll {unroll!r}: True, False or 'auto'")
        self.unroll = ((unroll is True or (unroll == "auto" and self.fold is not None)) and self.stages >= 2
                       and not self.listed and self.base is None)  # (rounds needs each item's first use in slot 0)
        # with "list", "unroll" ("auto" or True) takes rounds of bare, folded tiles only (listed_rounds): the listed
        # body's copies spill where each holds the where, the entry's flags and the check. Causal benchmark, H100: 59.3
        # us against 61.3 for the rolled list (benchmarks/NOTES.md, session 34); False keeps the list's loop rolled
        self.bare_rounds = unroll in (True, "auto") and self.bare_fold is not None and self.stages >= 2
        # "again": with "list", the second pass (every tile, where some skip was inexact: a row masked whole) "serial",
        # each product waited for before the next (serial_pass), or "overlap"ped as the first. It runs only for such
        # rows, but its code is beside the first pass's: overlapped, it makes ptxas serialise every wgmma of the causal
        # benchmark's 4-consumer kernel with rounds and spill 3 KB (0 bytes serial), and even with the list's loop
        # rolled the serial pass is faster (causal benchmark, H100: 59.8 us against 61.3; session 34) and spills less
        # on ragged shapes (16 -> 0 bytes at M 2000, N 2047)
        again = tune.get("again", "serial")
        if again not in ("serial", "overlap"):
            raise ValueError(f"ATTENTION_TUNING again {again!r}: 'serial' or 'overlap'")
        self.serial_again = again == "serial"
        # "uniform": the consumer warpgroup's index taken from lane 0 (__shfl_sync), so the compiler knows it uniform and
        # keeps Q's wgmma descriptors in uniform registers instead of moving them there (R2UR) before every product
        self.uniform = bool(tune.get("uniform", True))
        self.fixed: dict[str, tuple[str, str]] = {}  # a tile expression -> its constant slot and phase (rounds)
        self.verdict = 1 + 4 * self.stages  # "skip": "list": the barrier of the consumers' verdict (see listed_loop)
        if shared > configs.smem_limit(k.arch):
            raise UserError([error("E509", f"kernel `{k.kernel.name}`: the attention tiles need {shared} bytes of "
                                   f"shared memory, more than {k.arch} has", k.kernel.span)])
        # one block a multiprocessor (render takes this kernel only where the spec sets no launch bounds): ptxas
        # gives every thread `entry` registers, the block's pool, which setmaxnreg only moves between warpgroups
        k.config = replace(k.config, block=self.threads, min_blocks=1)
        entry = cuda_wgmma.ws_entry_regs(self.threads)
        if max(self.bn, self.dv) // 2 + 16 > entry:  # ptxas needs a wgmma's accumulators within the entry count
            raise UserError([error("E509", f"kernel `{k.kernel.name}`: attention tiles of {self.bn} keys and {self.dv} "
                                   f"output columns need more registers than {groups} consumer warpgroups have",
                                   k.kernel.span, hint="fewer consumer warpgroups or smaller tiles")])
        freed = (entry - WS_PRODUCER_REGS) * 128
        self.regs = (WS_PRODUCER_REGS, min(240, (entry + freed // (128 * groups)) // 8 * 8))
        self.maps: dict[str, str] = {}
        self.batch_coord: dict[str, str] = {}
        for name, o, inner, outer, stride in (("q", self.q, self.q.depth, self.q.extent, self.q.stride_mn),
                                              ("k", self.kk, self.kk.depth, self.kk.extent, self.kk.stride_mn),
                                              ("v", self.v, self.v.extent, self.v.depth, self.v.stride_k)):
            rows = self.bm if name == "q" else self.bn
            count, unit, terms = cuda_wgmma.batch_view(o, self.p.domain)
            dims, box = (inner, outer), (64, rows)
            if terms:
                dims, box = (*dims, count), (*box, 1)
                self.batch_coord[name] = " + ".join(f"(int)c{d}" + (f" * {w}" if w != 1 else "") for d, w in terms)
            self.maps[name] = k.tensor_map(f"tma_{name}", o.buffer, dims, stride * 2, box, unit * 2 if terms else 0)

    def fastest_groups(self, sm_count: int) -> int:
        """Consumer warpgroups a block: the fewest waves of blocks times a block's time (:data:`WS_BLOCK_US`)."""
        costs = WS_BLOCK_US["narrow" if self.depth <= 64 and self.dv <= 64 else "wide"]

        def time(groups: int) -> float:
            blocks = self.batch * -(-self.M // (64 * groups))
            return -(-blocks // sm_count) * costs[groups]

        return min(costs, key=lambda g: (time(g), -g))

    # ------------------------------------------------------------------ the producer
    def tma_copy(self, name: str, dst: str, c0: str, c1: str, bar: str) -> str:
        batch = self.batch_coord.get(name)
        if batch:
            return f"cvl_tma_3d({dst}, {self.maps[name]}, {c0}, {c1}, {batch}, {bar});"
        return f"cvl_tma_2d({dst}, {self.maps[name]}, {c0}, {c1}, {bar});"

    def producer(self) -> list[str]:
        """Thread 0 of warpgroup 0: Q, then tile t's K and V into slot t % S once the consumers released the
        slot's previous tile (use n of a slot completes phase n of its barriers); with "persistent", so for
        each work item of the block in turn, its Q once the consumers released the last item's."""
        s = self.stages
        q = [self.tma_copy("q", f"sq + {a * self.bm * 128}u", str(64 * a), "m0", "bars") for a in range(self.depth // 64)]
        kk = [self.tma_copy("k", f"sk + stage * {self.k_bytes}u + {a * self.bn * 128}u", str(64 * a), "n0",
                        "bars + 8 * (1 + stage)") for a in range(self.depth // 64)]
        v = [self.tma_copy("v", f"sv + stage * {self.v_bytes}u + {j * self.bn * 128}u", str(64 * j), "n0",
                       f"bars + 8 * (1 + {s} + stage)") for j in range(self.dv // 64)]
        load_k = [f"cvl_mbar_expect_tx(bars + 8 * (1 + stage), {self.k_bytes}u);", *kk]
        load_v = [f"cvl_mbar_expect_tx(bars + 8 * (1 + {s} + stage), {self.v_bytes}u);", *v]
        if self.listed:  # the listed tiles, then, should the consumers find a skip inexact, every tile again
            def tiles(first: str, end: str, tile: str) -> list[str]:
                return ["#pragma unroll 1", f"for (int t = {first}; t < {end}; ++t) {{", *indent([
                    f"const int tk = {tile};  // the key tile", f"const unsigned stage = t % {s}, use = t / {s};",
                    f"const int n0 = tk * {self.bn};",
                    f"if (t >= {s}) cvl_mbar_wait(bars + 8 * (1 + {2 * s} + stage), (use - 1) & 1);  // K's slot free",
                    *load_k,
                    f"if (t >= {s}) cvl_mbar_wait(bars + 8 * (1 + {3 * s} + stage), (use - 1) & 1);  // V's slot free",
                    *load_v]), "}"]

            work = [f"cvl_mbar_expect_tx(bars, {self.q_bytes}u);", *q, *tiles("0", "cvl_cnt", self.listed_tile("t")),
                    f"cvl_mbar_wait(bars + 8 * {self.verdict}, 0);  // the consumers' verdict on the skipped tiles",
                    "if (cvl_redo) {", *indent(tiles("cvl_cnt", f"cvl_cnt + {self.nt}", "t - cvl_cnt")), "}"]
        else:
            work = self.producer_tiles(q, load_k, load_v)
        return [
            f"asm volatile(\"setmaxnreg.dec.sync.aligned.u32 {self.regs[0]};\\n\" ::: \"memory\");",
            "if (threadIdx.x == 0) {", *indent(self.work_items(work)), "}",
        ]

    def producer_tiles(self, q: list[str], load_k: list[str], load_v: list[str]) -> list[str]:
        """The producer's work item (without "skip": "list"): its Q, then every key tile in turn (with "skip", those
        every consumer voted out left unloaded)."""
        s = self.stages
        g = "g + t" if self.persistent else "t"
        gp = f"({g})" if self.persistent else g
        if self.masked is not None:  # "skip": a tile every consumer voted out is not loaded, its slots filled empty
            load_k = ["if (cvl_gone) {", "    cvl_mbar_arrive(bars + 8 * (1 + stage));", "} else {", *indent(load_k), "}"]
            load_v = ["if (cvl_gone) {", f"    cvl_mbar_arrive(bars + 8 * (1 + {s} + stage));", "} else {",
                      *indent(load_v), "}"]
        loop = [
            f"const unsigned stage = {gp} % {s}, use = {gp} / {s};",
            f"const int n0 = t * {self.bn};",
            f"if ({g} >= {s}) cvl_mbar_wait(bars + 8 * (1 + {2 * s} + stage), (use - 1) & 1);  // K's slot free",
            *([f"const bool cvl_gone = (t > {s}) && cvl_all_voted(cvl_votes + ({gp}) % {self.vote_ring} * {self.groups}, "
               f"{self.groups});  // voted before tile t - {s}'s K slot was released"] if self.masked is not None else []),
            *load_k,
            f"if ({g} >= {s}) cvl_mbar_wait(bars + 8 * (1 + {3 * s} + stage), (use - 1) & 1);  // V's slot free",
            *load_v,
        ]
        # with "persistent", a work item's Q once every consumer is done with the last one's
        free = [f"if (i > 0) cvl_mbar_wait(bars + 8 * {1 + 4 * s}, (i - 1) & 1);  // Q's buffer free"]
        return [*(free if self.persistent else []), f"cvl_mbar_expect_tx(bars, {self.q_bytes}u);", *q,
                "#pragma unroll 1", f"for (int t = 0; t < {self.nt}; ++t) {{", *indent(loop), "}"]

    def work_items(self, work: list[str]) -> list[str]:
        """``work`` for the block's blocks of rows: its own (decoded in :meth:`render`), or with "persistent" each
        work item ``it`` of its turns ``i`` in a loop, ``g`` counting the tiles of the items before."""
        if not self.persistent:
            return work
        return ["#pragma unroll 1",
                f"for (int i = 0, it = blockIdx.x, g = 0; it < {self.items}; ++i, it += gridDim.x, g += {self.nt}) {{",
                *indent([*self.decode("it"), f"const int m0 = mt * {self.bm};", *work]), "}"]

    # ------------------------------------------------------------------ the consumers
    def use(self, tile: str) -> str:
        """Tile ``tile`` of this work item counted among all the block's tiles (with "persistent", after the ``g``
        tiles of its earlier work items; with "skip": "list", in the block's second pass, after the first's), which
        picks its slot and barrier phase."""
        return f"{self.base} + {tile}" if self.base else tile

    def at(self, tile: str) -> tuple[str, str]:
        """Tile ``tile``'s slot and the phase of its slot's barriers that it uses: constants and the round's phase in a
        copy of the unrolled loop's body (:attr:`fixed`), else computed from its :meth:`use`."""
        if tile in self.fixed:
            return self.fixed[tile]
        g = self.use(tile)
        return f"({g}) % {self.stages}", f"(({g}) / {self.stages}) & 1"

    def wait_full(self, which: str, tile: str) -> str:
        base = 1 if which == "k" else 1 + self.stages
        slot, phase = self.at(tile)
        return f"cvl_mbar_wait(bars + 8 * ({base} + {slot}), {phase});"

    def release(self, which: str, tile: str) -> str:
        base = 1 + 2 * self.stages if which == "k" else 1 + 3 * self.stages
        return f"if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * ({base} + {self.at(tile)[0]}));"

    def skip_slot(self, which: str, tile: str) -> list[str]:
        """"skip": tile ``tile``'s ``which`` slot, skipped: waited for (so no copy into it is still landing) and
        released by the releasing thread alone (see :meth:`skipping_loop`)."""
        return [f"if (threadIdx.x % 128 == 0) {self.wait_full(which, tile)}", self.release(which, tile)]

    def slot(self, tile: str) -> str:
        return f"({self.at(tile)[0]})"

    def free_q(self) -> list[str]:
        """With "persistent": each consumer warpgroup's arrival once its last product reading Q retired, after which
        the producer loads the next work item's Q."""
        if not self.persistent:
            return []
        return [f"if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * {1 + 4 * self.stages});  // Q read"]

    def masking_where(self):
        """"skip": the softmax's argument as ``where(c, x, f)`` (unrounded) with ``c`` independent of the scores
        and ``f`` the same for every element (a scalar), else None."""
        op = self.p.ops.get(self.softmax.args[0])
        if op is None or op.op != "where" or rounds(op):
            return None
        if self.first.out in ancestors(self.p.ops, op.args[0]) | ancestors(self.p.ops, op.args[2]):
            return None  # the mask or the fill computed from the scores
        if self.k.leaves([(op.args[2], self.where_maps(op)[2])]):
            return None  # the fill reads memory: not one value for every element
        return op

    def where_maps(self, op) -> list[tuple]:
        m = self.p.layout.maps[op.out]
        return [tuple(operand_map(op, m, i, self.p.types[a].shape, self.p.row_axis)) for i, a in enumerate(op.args)]

    # "skip": a comparison of a key's value with a row's: (the row side's extreme, its identity, the swapped operator)
    SEPARABLE = {"lt": ("max", "gt"), "le": ("max", "ge"), "gt": ("min", "lt"), "ge": ("min", "le")}
    SEPARABLE_TYPES = {DType.I32: ("int", "(-2147483647 - 1)", "2147483647"),
                       DType.F32: ("float", "__int_as_float(0xff800000)", "__int_as_float(0x7f800000)"),
                       DType.F64: ("double", "__longlong_as_double(0xfff0000000000000LL)",
                                   "__longlong_as_double(0x7ff0000000000000LL)")}

    @functools.cached_property
    def separable_mask(self):
        """"skip": the masking where's condition as ``(op, key side, row side)`` (each ``(value, map)``) when it is
        ``x < y``, ``<=``, ``>`` or ``>=`` (written either way round, ``op`` then the key side's) of a value that does
        not depend on the row (the key's side) and one that does not depend on the key (the row's side), both of
        one of SEPARABLE_TYPES: a causal mask from positions (``kpos <= qpos``), a window's edge. Else None.

        Then "some element of a tile is unmasked" needs no element-by-element test: for ``<`` and ``<=``, some key
        ``n`` has ``x[n] op max over the rows of y``; for ``>`` and ``>=`` the rows' minimum. A NaN compares false,
        as fmaxf and fminf leave it out, so the test is exact for floats too."""
        if not self.separable:
            return None
        return self.separable_term(self.masked.args[0], self.where_maps(self.masked)[0])

    def separable_term(self, name: str, cond_map):
        """``(op, key side, row side)`` of comparison ``name`` (at map ``cond_map``), as :attr:`separable_mask`
        describes, or None."""
        cmp = self.p.ops.get(name)
        if cmp is None or cmp.op not in self.SEPARABLE or len(cmp.args) != 2:
            return None
        types = {self.p.types[a].dtype for a in cmp.args}
        if len(types) != 1 or next(iter(types)) not in self.SEPARABLE_TYPES:
            return None
        rank = len(self.p.domain)
        sides = []
        for i, a in enumerate(cmp.args):
            m = tuple(operand_map(cmp, cond_map, i, self.p.types[a].shape, self.p.row_axis))
            axes = {d for _, read in self.k.leaves([(a, m)]) for d in read if d is not None}
            sides.append(((a, m), rank - 2 in axes, rank - 1 in axes))  # (value, reads a row, reads a key)
        (x, x_row, x_key), (y, y_row, y_key) = sides
        if not x_row and not y_key:
            return cmp.op, x, y
        if not y_row and not x_key:
            return self.SEPARABLE[cmp.op][1], y, x
        return None

    @functools.cached_property
    def listed_terms(self) -> list | None:
        """"skip": "list": the masking where's condition as separable terms (:meth:`separable_term`) it is the
        conjunction of (``&``: a window ``(kpos <= qpos) & (kpos > qpos - 256)``), or None. An element passes only
        if each key passes every term against the rows' extremes, so a tile no key of which does holds no unmasked
        element; and it passes everywhere when each key passes every term against the other extremes."""
        if not self.separable:
            return None

        def terms(name: str, cond_map) -> list | None:
            op = self.p.ops.get(name)
            if op is not None and op.op == "and" and len(op.args) == 2:
                parts = [terms(a, tuple(operand_map(op, cond_map, i, self.p.types[a].shape, self.p.row_axis)))
                         for i, a in enumerate(op.args)]
                return None if None in parts else parts[0] + parts[1]
            term = self.separable_term(name, cond_map)
            return None if term is None else [term]

        return terms(self.masked.args[0], self.where_maps(self.masked)[0])

    SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}

    def extremes(self, op: str, value: str):
        """For a separable comparison ``op`` whose row side is ``value``: the C type, and for the extreme the
        comparison is decided by (for ``<`` and ``<=`` the rows' largest) and for the other one (their smallest: every
        row passes when a key passes against it) each ``(name, identity, C function)``."""
        ctype, lowest, highest = self.SEPARABLE_TYPES[self.p.types[value].dtype]
        c_fn = {"int": "{}", "float": "f{}f", "double": "f{}"}[ctype]
        largest, smallest = ("max", lowest, c_fn.format("max")), ("min", highest, c_fn.format("min"))
        return (ctype, largest, smallest) if self.SEPARABLE[op][0] == "max" else (ctype, smallest, largest)

    def mask_rows(self) -> list[str]:
        """"skip" with a separable mask (:attr:`separable_mask`): ``cvl_rows``, the row side's extreme over this
        warp's 16 rows within M (every lane holds it), once a block of rows."""
        sep = self.separable_mask
        if sep is None:
            return []
        op, _, (value, m) = sep
        ctype, (pick, start, combine), _ = self.extremes(op, value)
        lines: list[str] = []
        expr = self.k.walk(lines.append, self.coord, None, None).value(value, m)
        inside = f"if (m < {self.M}) " if self.M % self.bm else ""
        return [f"{ctype} cvl_rows = {start};  // the mask's row side, its {pick} over this warp's rows", "#pragma unroll",
                "for (int r = 0; r < 2; ++r) {", "    const int m = m0 + wm + lane / 4 + r * 8;", "    (void)m;",
                f"    {inside}{{", *indent(lines, 2), f"        cvl_rows = {combine}(cvl_rows, ({ctype})({expr}));", "    }",
                "}", "#pragma unroll", "for (int o = 4; o < 32; o *= 2)",
                f"    cvl_rows = {combine}(cvl_rows, __shfl_xor_sync(0xffffffffu, cvl_rows, o));"]

    def mask_check(self, tile: str) -> list[str]:
        """"skip": ``cvl_any``, whether ``c`` of the masking where is true anywhere in this thread's elements of
        key tile ``tile`` (rows and keys past the operands count as masked, their reads clamped into the buffer), without
        a branch. With a separable mask (:attr:`separable_mask`), whether any of this lane's keys of the tile (every
        32nd) passes the comparison with its warp's row extreme (:meth:`mask_rows`): a warpgroup's vote over its
        lanes then covers every key of the tile and every row of its four warps, at a load a key."""
        op, k = self.masked, self.k
        sep = self.separable_mask
        if sep is not None:
            cmp, (value, m), _ = sep
            ctype = self.SEPARABLE_TYPES[self.p.types[value].dtype][0]
            lines: list[str] = []
            expr = k.walk(lines.append, self.coord, None, None).value(value, m)
            symbol = self.SYMBOL[cmp]
            inside = f"if (n < {self.N}) " if self.N % self.bn else ""
            return ["cvl_any = false;  // some key of the next tile passes the mask's test against this warp's rows",
                    f"if ({tile} < {self.nt}) {{  // (no tile past the last: its mask would be read past the buffer)",
                    "#pragma unroll", f"    for (int j = 0; j < {self.bn // 32}; ++j) {{",
                    f"        const int n = ({tile}) * {self.bn} + j * 32 + lane;", "        (void)n;",
                    f"        {inside}{{", *indent(lines, 3),
                    f"            cvl_any = cvl_any | (({ctype})({expr}) {symbol} cvl_rows);", "        }", "    }", "}"]
        lines: list[str] = []
        w = k.walk(lines.append, self.coord, None, None)
        cond = w.value(op.args[0], self.where_maps(op)[0])
        tests = ([f"m_ < {self.M}"] if self.M % self.bm else []) + ([f"n_ < {self.N}"] if self.N % self.bn else [])
        # without branches: an element past M or N reads the last row's or column's (in bounds) and counts as masked
        inside = " && ".join(tests) or "true"
        return ["cvl_any = false;  // the next tile's mask anywhere true in this thread's elements",
                f"if ({tile} < {self.nt}) {{  // (no tile past the last: its mask would be read past the buffer)",
                f"    const int n0 = ({tile}) * {self.bn};",
                "#pragma unroll", f"    for (int ni = 0; ni < {self.ni}; ++ni)",
                "#pragma unroll", "    for (int h = 0; h < 2; ++h)",
                "#pragma unroll", "    for (int q = 0; q < 2; ++q) {",
                "        const int m_ = m0 + wm + lane / 4 + h * 8;",
                "        const int n_ = n0 + ni * 8 + lane % 4 * 2 + q;",
                f"        const int m = min(m_, {self.M - 1}), n = min(n_, {self.N - 1});", "        (void)m; (void)n;",
                *indent(lines, 2),
                f"        cvl_any = cvl_any | (({inside}) & ({cond} != 0));  // no short circuit: every load issued at once",
                "    }", "}"]

    def fill_gone(self) -> tuple[list[str], str]:
        """"skip": (lines, test): whether row slot ``r`` of this thread (row ``m``) holds a running maximum that puts
        the masking where's fill at a numerator of exactly 0 (2^((f - max) log2 e) below f32's range), so a tile all
        fill adds nothing to its sum or output; rows past M pass."""
        op, k = self.masked, self.k
        lines: list[str] = []
        fill = k.walk(lines.append, self.coord, None, None).value(op.args[2], self.where_maps(op)[2])
        rows = f"m >= {self.M} || " if self.M % self.bm else ""
        return lines, (f"({rows}(row_max[r] > (float)({fill}) && "
                       f"fmaf((float)({fill}), {LOG2E}, -row_base[r]) < {SKIP_EXPONENT}f))")

    def skip_vote(self, tile: str) -> list[str]:
        """"skip": this warpgroup's vote on key tile ``tile`` (after :meth:`mask_check`), the same in its 128 threads:
        no element masked in, and every row of the warpgroup (within M) already so far above the fill that the
        fill's numerator is 0. Taken at the end of tile t on tile t + stages + 1: a row's maximum only grows, so
        the vote still holds when that tile comes. It goes into ``cvl_plan``'s bit ``stages + 1`` and, from the
        releasing thread, into ``cvl_votes`` for the producer, before tile t + 1's K slot is released (the release
        orders the write before the producer's wait on that slot, after which it reads the vote and loads tile t
        + stages + 1 or not). At the end of the tile rather than before its own K release, the vote does not hold
        up the producer."""
        lines, gone = self.fill_gone()
        ring, groups = self.vote_ring, self.groups
        return ["{", *indent([
            *lines, "bool ok = !cvl_any;", "#pragma unroll", "for (int r = 0; r < 2; ++r) {",
            "    const int m = m0 + wm + lane / 4 + r * 8;", "    (void)m;", f"    ok = ok && {gone};",
            "}", "cvl_vote = false;", f"if ({tile} < {self.nt}) cvl_vote = cvl_wg_all(ok, 3u + (unsigned)wg);",
            f"cvl_plan |= (unsigned)cvl_vote << {self.vote_ahead};",
            f"if (threadIdx.x % 128 == 0) cvl_votes[({self.use(tile)}) % {ring} * {groups} + wg] = cvl_vote;"]), "}"]

    def skipping_loop(self) -> list[str]:
        """The overlapped loop with "skip": ``cvl_skip`` says whether tile t is skipped, by this warpgroup's vote
        taken at the end of tile t - stages - 1 (:meth:`skip_vote`; ``cvl_plan`` holds the votes on the tiles up to
        t + stages + 1). A skipped tile's K and V slots are waited for and released unread, the last tile's O += P V
        issued alone if one waits (``cvl_pend``); a tile that runs issues that product beside its S as the plain
        loop does. A tile every warpgroup voted out is not loaded at all: the producer reads the votes once the
        slot's tile before (``stages`` earlier) is released and fills the slots with a bare arrival.

        Only the releasing thread waits for a skipped tile's slots (:meth:`skip_slot`). Had every warp waited, as
        for a tile that runs, warp 0's release could come before another warp's wait: nothing collective orders
        them (a tile that runs has its wgmma, which every warp of the warpgroup issues after its wait and warp 0
        retires before it releases). The producer may then refill the slot, and a warp that reaches its wait
        after that second fill finds the barrier's parity back where it was and waits for a phase that never
        comes (the hang of sessions 24-27 with 4 consumers).

        Tiles 0 to ``stages`` are never skipped: the first vote, at the end of tile 0, is on tile stages + 1."""
        _, rescale = self.softmax_parts()
        nt, ahead = self.nt, f"t + {self.vote_ahead}"
        first = ["{", *indent([
            self.wait_full("k", "0"), "cvl_wgmma_fence();",
            *self.issue_scores(self.slot("0") if self.persistent else "0"), "cvl_wgmma_commit();",
            *self.mask_check(str(self.vote_ahead)), "cvl_wgmma_wait<0>();", "cvl_pin(s[0]);", self.release("k", "0"),
            "float alpha[2];", *self.scores_ready("0"), "(void)alpha;  // o is still 0", *self.pack(),
            *self.skip_vote(str(self.vote_ahead)), "cvl_plan >>= 1;"]), "}"]
        # four straight-line bodies, as ptxas serialises every wgmma when a path it cannot rule out (a second
        # test of the same flag) would read accumulators before their wait (C7514)
        check, vote = self.mask_check(ahead), self.skip_vote(ahead)
        retire_pv = ["cvl_wgmma_wait<0>();", "cvl_pin(o[0]);", "cvl_pin(pf);", self.release("v", "t - 1")]
        skip_v = [*self.skip_slot("v", "t"), "cvl_pend = 0;"]
        skipped_pending = [self.wait_full("v", "t - 1"), "cvl_wgmma_fence();", *self.issue_pv(self.slot("t - 1")),
                           "cvl_wgmma_commit();", *check, *self.skip_slot("k", "t"), *retire_pv, *skip_v]
        skipped = [*check, *self.skip_slot("k", "t"), *skip_v]
        ran_pending = [  # every warp waits for a tile that runs: its wgmma orders warp 0's release after them all
            self.wait_full("k", "t"), self.wait_full("v", "t - 1"), "cvl_wgmma_fence();", *self.issue_scores(self.slot("t")),
            "cvl_wgmma_commit();", *self.issue_pv(self.slot("t - 1")), "cvl_wgmma_commit();", *check,
            "cvl_wgmma_wait<1>();  // S of tile t (O += P V of tile t - 1 may still run)", "cvl_pin(s[0]);",
            self.release("k", "t"), "float alpha[2];", *self.scores_ready("t"), *retire_pv, *rescale, *self.pack(),
        ]
        ran = [  # after a skipped tile: no product waits, O is settled
            self.wait_full("k", "t"), "cvl_wgmma_fence();", *self.issue_scores(self.slot("t")), "cvl_wgmma_commit();",
            *check, "cvl_wgmma_wait<0>();", "cvl_pin(s[0]);", self.release("k", "t"),
            "float alpha[2];", *self.scores_ready("t"), *rescale, *self.pack(), "cvl_pend = 1;",
        ]
        loop = ["cvl_skip = (__shfl_sync(0xffffffffu, cvl_plan, 0) & 1u) != 0;  // lane 0's: warp-uniform to ptxas",
                "if (cvl_skip) {", "    if (cvl_pend) {", *indent(skipped_pending, 2), "    } else {", *indent(skipped, 2),
                "    }", "} else {", "    if (cvl_pend) {", *indent(ran_pending, 2), "    } else {", *indent(ran, 2), "    }",
                "}", *vote, "cvl_plan >>= 1;"]
        last = [*self.free_q(), "if (cvl_pend) {", *indent([
            self.wait_full("v", str(nt - 1)), "cvl_wgmma_fence();", *self.issue_pv(self.slot(str(nt - 1))),
            "cvl_wgmma_commit();", "cvl_wgmma_wait<0>();", "cvl_pin(o[0]);",
            *([self.release("v", str(nt - 1))] if self.persistent else [])]), "}"]
        return ["bool cvl_skip;  // tile t's logits all masked to 0: skipped",
                "bool cvl_vote;  // this warpgroup's vote on tile t + stages + 1",
                "bool cvl_any;  // a tile's mask, some element of this thread's",
                f"unsigned cvl_plan = 0;  // bit j: tile t + j skipped (this warpgroup's votes), j up to {self.vote_ahead}",
                "int cvl_pend = 1;  // O += P V of tile t - 1 not yet issued (its V slot held)",
                *self.mask_rows(), *first, "#pragma unroll 1", f"for (int t = 1; t < {nt}; ++t) {{", *indent(loop), "}", *last]

    def consumer_loop(self) -> list[str]:
        if self.listed:
            return self.listed_loop()
        if self.masked is not None:
            return self.skipping_loop()
        return self.overlapped_pass() if self.overlap else self.serial_pass()

    def overlapped_pass(self, listed: bool = False) -> list[str]:
        """The overlapped loop over every key tile, or with ``listed`` ("skip": "list") over the block's listed ones
        (``cvl_tiles``, ``cvl_cnt`` of them; ``tk`` the key tile of use ``t``), checking before each tile that
        follows skipped ones, and after the first when tiles came before it, that the skip was exact
        (:meth:`listed_check`)."""
        _, rescale = self.softmax_parts()
        nt = self.nt
        count, last_use = ("cvl_own", "cvl_own - 1") if listed else (str(nt), str(nt - 1))
        # "pingpong": the two consumer warpgroups take turns issuing their products (named barrier 1 + wg is
        # warpgroup wg's turn, given by the other's arrival once it issued its own), so one's softmax runs
        # while the other's products do
        turn = ["asm volatile(\"bar.sync %0, 256;\\n\" :: \"r\"(1 + wg) : \"memory\");"] if self.pingpong else []
        done = ["asm volatile(\"bar.arrive %0, 256;\\n\" :: \"r\"(2 - wg) : \"memory\");"] if self.pingpong else []
        first = ["{", *indent([
            *([f"const int tk = {self.listed_tile('0')};  // the first listed key tile", *self.bare_flag("0")]
              if listed else []),
            self.wait_full("k", "0"), *turn, "cvl_wgmma_fence();",
            *self.issue_scores(self.slot("0") if self.base else "0"), "cvl_wgmma_commit();",
            *done, "cvl_wgmma_wait<0>();", "cvl_pin(s[0]);", self.release("k", "0"),
            "float alpha[2];", *(self.listed_scores() if listed else self.scores_ready("0")),
            "(void)alpha;  // o is still 0",
            *(self.listed_check("tk != 0", "tiles skipped before it: this tile's maxima must zero their numerators")
              if listed else []),
            *self.pack()]), "}"]
        def step(t: str, bare: bool = False) -> list[str]:  # the loop's body for tile t (bare: a listed, folded one)
            if bare:  # (listed_rounds: a bare tile after no gap, folded: its entry need not be read)
                # (the numerators pinned where the accumulators were: else ptxas computes them into other registers
                # while P V holds pf and o, and the causal benchmark's 4-consumer kernel spills)
                head, scores = [], [*self.softmax_parts(("fold_abs", "fold_c"))[0], "cvl_pin(s[0]);"]
            elif listed:
                head = [f"const int tk = {self.listed_tile(t)};  // the key tile", *self.bare_flag(t),
                        *self.listed_check(f"(cvl_tiles[{t}] & {LIST_GAP}u) != 0u", "tiles skipped since the last (bit 14)")]
                scores = self.listed_scores()
            else:
                head, scores = [], self.scores_ready(t)
            return [
                *head,
                self.wait_full("k", t), self.wait_full("v", f"{t} - 1"), *turn,
                "cvl_wgmma_fence();", *self.issue_scores(self.slot(t)), "cvl_wgmma_commit();",
                *self.issue_pv(self.slot(f"{t} - 1")), "cvl_wgmma_commit();", *done,
                f"cvl_wgmma_wait<1>();  // S of tile {t} (O += P V of the tile before may still run)", "cvl_pin(s[0]);",
                self.release("k", t),
                "float alpha[2];", *scores,
                "cvl_wgmma_wait<0>();", "cvl_pin(o[0]);", "cvl_pin(pf);", self.release("v", f"{t} - 1"),
                *rescale, *self.pack(),
            ]

        # with "persistent" the next work item's tiles reuse the last V slot, with "list" the second pass's
        last = [*self.free_q(), self.wait_full("v", last_use), *turn, "cvl_wgmma_fence();",
                *self.issue_pv(self.slot(last_use)),
                "cvl_wgmma_commit();", *done, "cvl_wgmma_wait<0>();", "cvl_pin(o[0]);",
                *([self.release("v", last_use)] if self.persistent or listed else [])]
        if self.pingpong:  # warpgroup 1 lets warpgroup 0 go first; warpgroup 0 takes that extra arrival at the end
            first = ["if (wg == 1) asm volatile(\"bar.arrive 1, 256;\\n\" ::: \"memory\");", *first]
            last += ["if (wg == 0) asm volatile(\"bar.sync 1, 256;\\n\" ::: \"memory\");"]
        if self.unroll:
            loop = self.rounds(step, count)
        elif listed and self.bare_rounds:
            loop = self.listed_rounds(step, count)
        else:
            loop = ["#pragma unroll 1", f"for (int t = 1; t < {count}; ++t) {{", *indent(step("t")), "}"]
        return [*first, *loop, *last]

    def serial_pass(self) -> list[str]:
        """Without "overlap", and for "again": "serial": every key tile (their uses of the slots counted from
        :attr:`base`), each product waited for before the next (no two wgmma in flight): the same arithmetic, in the
        same order, as the overlapped pass."""
        _, rescale = self.softmax_parts()
        loop = [
            self.wait_full("k", "t"), "cvl_wgmma_fence();", *self.issue_scores(self.slot("t")),
            "cvl_wgmma_commit();", "cvl_wgmma_wait<0>();", "cvl_pin(s[0]);", self.release("k", "t"),
            "float alpha[2];", *self.scores_ready("t"), *rescale, *self.pack(),
            self.wait_full("v", "t"), "cvl_wgmma_fence();", *self.issue_pv(self.slot("t")),
            "cvl_wgmma_commit();", "cvl_wgmma_wait<0>();", "cvl_pin(o[0]);", "cvl_pin(pf);", self.release("v", "t"),
        ]
        return ["#pragma unroll 1", f"for (int t = 0; t < {self.nt}; ++t) {{", *indent(loop), "}", *self.free_q()]

    def rounds(self, step, count: str) -> list[str]:
        """"unroll": the overlapped loop over tiles 1 .. ``count`` - 1 in rounds of S (the slot count). Round r's tile
        t + j (t = 1 + S r) is in slot (1 + j) % S, and is that slot's use number r + (1 + j) / S: phase ``cvl_ph`` (the
        round's, t / S & 1), or the next one for j = S - 1; the tile before it is in slot j, in the round's phase. So
        every copy of the body (``step`` renders each) has constant slots and barrier addresses, and the phase costs one
        division a round. Needs a work item's first use to be slot 0, phase 0 (:attr:`base` None: see :attr:`unroll`).
        The tiles after the last whole round take the plain loop."""
        s = self.stages
        end = str(1 + (int(count) - 1) // s * s) if count.isdigit() else f"1 + ({count} - 1) / {s} * {s}"
        lines = []
        if end != "1":
            lines += ["#pragma unroll 1", f"for (int t = 1; t < {end}; t += {s}) {{", *indent(self.round(step)), "}"]
        if end != count:
            lines += ["#pragma unroll 1", f"for (int t = {end}; t < {count}; ++t) {{", *indent(step("t")), "}"]
        return lines

    def round(self, step, bare: bool = False) -> list[str]:
        """One round of :meth:`rounds` (tiles t .. t + S - 1, t = 1 + S r): the round's phase, then ``step``'s body
        (with ``bare``) for each tile, its slots and phases constants (:attr:`fixed`)."""
        s = self.stages
        body = [f"const unsigned cvl_ph = (t / {s}) & 1;  // the round's phase of the slots' barriers"]
        for j in range(s):
            t = f"t + {j}" if j else "t"
            self.fixed = {t: (str((1 + j) % s), "cvl_ph ^ 1" if j == s - 1 else "cvl_ph"), f"{t} - 1": (str(j), "cvl_ph")}
            try:
                body += ["{", *indent(step(t, bare)), "}"]
            finally:
                self.fixed = {}
        return body

    def listed_rounds(self, step, count: str) -> list[str]:
        """"unroll" with "skip": "list" (:attr:`bare_rounds`): the listed loop over uses 1 .. ``count`` - 1 takes a
        round of S tiles (:meth:`round`) where one may start (use t = 1 + S r) and its S tiles are all bare, with no
        tiles skipped before any of them, and bare tiles fold (``fold_flip`` false): each copy of the body is then the
        folded tile's alone, with no read of its entry, no where and no check. Else it takes one tile by the general
        body. A causal block's bare tiles come first, so most of them run in rounds; its diagonal tiles one by one."""
        s = self.stages
        entries = " | ".join(f"(cvl_tiles[t{f' + {j}' if j else ''}] ^ {LIST_BARE}u)" for j in range(s))
        test = (f"const bool cvl_round = (t - 1) % {s} == 0 && t + {s} <= {count} && !fold_flip && "
                f"(({entries}) & {LIST_BARE | LIST_GAP}u) == 0u;  // S bare tiles, none after a gap, from slot 1")
        return ["#pragma unroll 1", f"for (int t = 1; t < {count}; ) {{", *indent([
            test, "if (cvl_round) {", *indent([*self.round(step, bare=True), f"t += {s};"]),
            "} else {", *indent([*step("t"), "++t;"]), "}"]), "}"]

    def bare_flag(self, use: str) -> list[str]:
        """"bare": ``cvl_bare``, whether listed tile ``use`` passes the mask everywhere (its entry's top bit)."""
        return [f"const bool cvl_bare = cvl_tiles[{use}] > {LIST_BARE - 1}u;  // every element unmasked"] if self.bare else []

    def listed_tile(self, use: str) -> str:
        """"skip": "list": the key tile of listed entry ``use``."""
        return f"cvl_tiles[{use}] & {LIST_TILE}"

    def listed_scores(self) -> list[str]:
        """:meth:`scores_ready` for listed tile ``tk``; with "bare", a tile every element of which passes the mask
        takes the where's value without the where (no loads of the mask). Where that value is ``GEMM * u``
        (:attr:`bare_fold`) and ``u`` is not negative, a bare tile is "fold"ed: no pass over its elements at all, its
        maximum taken over the raw accumulators and scaled once, its exponent ``acc * (u log2 e) - base``; the tile's
        maximum scale and exponent factor (``cvl_fs``, ``cvl_fc``) are chosen at run time. The same bits as scaling
        each element first when ``u`` is a power of two (then ``acc * u`` and ``u log2 e`` are exact); else each
        exponent's argument may differ by a rounding of the product."""
        if not self.bare:
            return self.scores_ready("tk")
        op = self.masked
        bare = self.s_elements(self.logit(op.args[1], self.where_maps(op)[1]))
        where = self.s_elements(self.logit())
        if self.bare_fold is None:
            stats, _ = self.softmax_parts()
            return [f"const int n0 = tk * {self.bn};", "(void)n0;", "if (cvl_bare) {", *indent(bare), "} else {",
                    *indent(where), "}", *stats]
        stats, _ = self.softmax_parts(("cvl_fs", "cvl_fc"))
        return [f"const int n0 = tk * {self.bn};", "(void)n0;",
                "const bool cvl_fold = cvl_bare && !fold_flip;  // the raw accumulators, scaled by the factors",
                "if (!cvl_fold) {", *indent(["if (cvl_bare) {", *indent(bare), "} else {", *indent(where), "}"]), "}",
                "const float cvl_fs = cvl_fold ? fold_abs : 1.0f;  // the maximum's scale",
                f"const float cvl_fc = cvl_fold ? fold_c : {LOG2E};  // the exponent's factor",
                *stats]

    def listed_check(self, gap: str, what: str) -> list[str]:
        """"skip": "list": when ``gap`` (tiles were skipped just before this point), ``cvl_ok`` false unless every
        row slot of this thread holds a maximum that zeroes the fill's numerators (:meth:`fill_gone`). The tiles
        computed are those the plain loop computes, less some all fill; so long as each row's maximum when a skipped
        tile would have come (or, for tiles before the first computed, after that one: its maximum rescales what
        they added by 2^-150, to exactly 0) zeroes the fill, the skip adds what they would have, nothing, and the
        results are the same bits."""
        lines, gone = self.fill_gone()
        return [f"if ({gap}) {{  // {what}", *indent([
            *lines, "#pragma unroll", "for (int r = 0; r < 2; ++r) {", "    const int m = m0 + wm + lane / 4 + r * 8;",
            "    (void)m;", f"    cvl_ok = cvl_ok && {gone};", "}"]), "}"]

    def listed_loop(self) -> list[str]:
        """"skip": "list": the overlapped loop over the block's listed key tiles (:meth:`listed_tiles`), then the
        verdict of every consumer thread: were the skips exact (:meth:`listed_check`; a row masked whole, or whose
        logits come within 150 / log2 e of the fill, is not)? The first consumer thread publishes it to the producer
        (``cvl_redo``, then an arrival on the verdict barrier); if not, every consumer starts afresh and runs the
        plain loop over every key tile, which the producer loads again, their uses of the slots counted on from
        the first pass's."""
        nt = self.nt
        first_pass = self.overlapped_pass(listed=True)
        self.base = "cvl_cnt"
        try:
            again = [*self.zero_state(), *(self.serial_pass() if self.serial_again else self.overlapped_pass())]
        finally:
            self.base = None
        own = ("const int cvl_own = __shfl_sync(0xffffffffu, cvl_mine[wg], 0);  // this warpgroup's listed tiles"
               if self.trim else "const int cvl_own = cvl_cnt;  // the listed tiles")
        # "trim": the listed tiles after this warpgroup's last, which none of its rows sees: their slots released
        # unread, waited for by the releasing thread alone (see skipping_loop)
        unread = ["#pragma unroll 1", "for (int t = cvl_own; t < cvl_cnt; ++t) {",
                  *indent([*self.skip_slot("k", "t"), *self.skip_slot("v", "t")]), "}"] if self.trim else []
        return [
            own, "bool cvl_ok = true;  // the skipped tiles' numerators all 0 in this thread's rows",
            "if (cvl_own > 0) {", *indent(first_pass), "}",
            *self.listed_check(f"cvl_own == 0 || ({self.listed_tile('cvl_own - 1')}) != {nt - 1}",
                               "tiles skipped after the last"),
            *unread,
            f"const bool cvl_again = cvl_consumers_any(!cvl_ok, {128 * self.groups}u);  // some skip inexact",
            "if (wg == 0 && threadIdx.x % 128 == 0) {", "    cvl_redo = cvl_again;",
            f"    cvl_mbar_arrive(bars + 8 * {self.verdict});  // the producer's: load every tile again, or stop", "}",
            "if (cvl_again) {  // every key tile, as without the skip", *indent(again), "}",
        ]

    def consumer(self) -> list[str]:
        work = [*self.warpgroup_state("wg"), *self.fold_constants(self.bare_fold if self.fold is None else None),
                f"float s[1][{self.ni}][4];", f"unsigned pf[{self.ni // 2}][4];  // P's A fragments",
                f"cvl_mbar_wait(bars, {'i & 1' if self.persistent else '0'});  // Q",
                *self.consumer_loop(), *self.finish()]
        return [
            f"asm volatile(\"setmaxnreg.inc.sync.aligned.u32 {self.regs[1]};\\n\" ::: \"memory\");",
            "const int lane = threadIdx.x % 32;",
            ("const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128) - 1, 0);  // consumer warpgroup (uniform)"
             if self.uniform else "const int wg = (int)(threadIdx.x / 128) - 1;  // consumer warpgroup"),
            "const int wm = wg * 64 + (threadIdx.x / 32) % 4 * 16;  // this warp's rows of the block",
            "const int d0 = 0;",
            *self.work_items(work),
        ]

    # ------------------------------------------------------------------ "skip": "list", the block's key tiles
    def listed_bytes(self) -> int:
        """"skip": "list": the shared memory of :meth:`listed_shared` and the verdict's barrier."""
        return -(-self.N // 32) + 2 * self.nt + 8 + 8 + 4 * self.groups

    def listed_shared(self) -> list[str]:
        chunks, nt = -(-self.N // 32), self.nt
        return [f"__shared__ unsigned char cvl_chunks[{chunks}];  // \"skip\": \"list\": some key of these 32 passes "
                "the mask against the block's rows",
                f"__shared__ unsigned short cvl_tiles[{nt}];  // the key tiles to compute, in order (see listed_tiles)",
                "__shared__ int cvl_count;  // how many",
                *([f"__shared__ int cvl_mine[{self.groups}];  // \"trim\": each warpgroup's, up to its last"]
                  if self.trim else []),
                "__shared__ volatile int cvl_redo;  // the consumers' verdict: some skip inexact, every tile again"]

    def listed_keys(self) -> list[str]:
        """"skip": "list", every thread of the block: ``cvl_chunks[c]``, bit 0: whether some key of the 32 from ``32 c``
        passes every term of the mask (:attr:`listed_terms`) against the extreme of its row side over the block's
        rows within M (each warp takes the extremes itself: a load a lane for every 32 rows, no barrier); with "bare"
        bit 1, whether every key does against the other extremes (so every row); with "trim" bit 2 + w, whether some
        key does against warpgroup w's rows' extremes."""
        g, k = self.groups, self.k
        decl, row_lines, row_update, shuffle, key_lines, tests, every, mine = [], [], [], [], [], [], [], []
        any_nan = []
        for j, (op, (kvalue, kmap), (rvalue, rmap)) in enumerate(self.listed_terms):
            ctype, (pick, start, combine), (other, other_start, other_combine) = self.extremes(op, rvalue)
            symbol = self.SYMBOL[op]
            nan = ctype != "int"  # a NaN row fails every comparison: no tile passes everywhere
            row = k.walk(row_lines.append, self.coord, None, None).value(rvalue, rmap)
            row_lines.append(f"const {ctype} r{j}_ = ({ctype})({row});")
            key = k.walk(key_lines.append, self.coord, None, None).value(kvalue, kmap)
            key_lines.append(f"const {ctype} k{j}_ = ({ctype})({key});")
            if self.trim:  # rows 32 i to 32 i + 31 are warpgroup i / 2's
                decl.append(f"{ctype} cvl_rows{j}[{g}] = {{{', '.join([start] * g)}}};  // term {j}'s row side, its "
                            f"{pick} over each warpgroup's rows")
                row_update.append(f"cvl_rows{j}[i / 2] = {combine}(cvl_rows{j}[i / 2], r{j}_);")
                shuffle += [f"cvl_rows{j}[{w}] = {combine}(cvl_rows{j}[{w}], __shfl_xor_sync(0xffffffffu, "
                            f"cvl_rows{j}[{w}], o));" for w in range(g)]
                mine.append([f"k{j}_ {symbol} cvl_rows{j}[{w}]" for w in range(g)])
            else:
                decl.append(f"{ctype} cvl_rows{j} = {start};  // term {j}'s row side, its {pick} over the block's rows")
                row_update.append(f"cvl_rows{j} = {combine}(cvl_rows{j}, r{j}_);")
                shuffle.append(f"cvl_rows{j} = {combine}(cvl_rows{j}, __shfl_xor_sync(0xffffffffu, cvl_rows{j}, o));")
                tests.append(f"k{j}_ {symbol} cvl_rows{j}")
            if self.bare:
                decl.append(f"{ctype} cvl_all{j} = {other_start};  // and its {other}")
                row_update.append(f"cvl_all{j} = {other_combine}(cvl_all{j}, r{j}_);")
                shuffle.append(f"cvl_all{j} = {other_combine}(cvl_all{j}, __shfl_xor_sync(0xffffffffu, cvl_all{j}, o));")
                every.append(f"k{j}_ {symbol} cvl_all{j}")
                if nan:
                    any_nan.append(f"r{j}_ != r{j}_")
        if self.bare and any_nan:
            decl.append("bool cvl_nan = false;  // some row's value NaN")
            row_update.append(f"cvl_nan = cvl_nan || {' || '.join(any_nan)};")
            every.append("!cvl_nan")
        if self.trim:
            keys = [f"mine |= (unsigned)({' && '.join(m[w] for m in mine)}) << {w};" for w in range(g)]
            keys.append("pass = mine != 0;")
        else:
            keys = [f"pass = {' && '.join(tests)};"]
        if self.bare:
            keys.append(f"every = {' && '.join(every)};")
        rows_in = f"if (m < {self.M}) " if self.M % self.bm else ""
        keys_in = f"if (n < {self.N}) " if self.N % 32 else ""
        warps, chunks = self.threads // 32, -(-self.N // 32)
        flag = " | ".join(["__any_sync(0xffffffffu, pass)", *(["(__all_sync(0xffffffffu, every) << 1)"] if self.bare else []),
                           *[f"(__any_sync(0xffffffffu, (mine >> {w}) & 1u) << {2 + w})" for w in range(g) if self.trim]])
        return ["{  // \"skip\": \"list\": which keys some row of the block sees" + (", and every row" if self.bare else ""),
                *indent([
                    *decl,
                    "#pragma unroll", f"for (int i = 0; i < {self.bm // 32}; ++i) {{",
                    "    const int m = m0 + i * 32 + (int)(threadIdx.x % 32);", "    (void)m;",
                    f"    {rows_in}{{", *indent([*row_lines, *row_update], 2), "    }", "}",
                    *(["cvl_nan = __any_sync(0xffffffffu, cvl_nan);"] if self.bare and any_nan else []),
                    "#pragma unroll", "for (int o = 1; o < 32; o *= 2) {", *indent(shuffle), "}",
                    "#pragma unroll 4", f"for (int c = threadIdx.x / 32; c < {chunks}; c += {warps}) {{",
                    "    const int n = c * 32 + (int)(threadIdx.x % 32);", "    (void)n;", "    bool pass = false;",
                    *(["    bool every = true;  // (keys past N pass everywhere)"] if self.bare else []),
                    *(["    unsigned mine = 0;  // bit w: some row of warpgroup w passes"] if self.trim else []),
                    f"    {keys_in}{{", *indent([*key_lines, *keys], 2), "    }",
                    f"    const unsigned char flag = (unsigned char)({flag});",
                    "    if (threadIdx.x % 32 == 0) cvl_chunks[c] = flag;",
                    "}"]), "}"]

    def listed_tiles(self) -> list[str]:
        """"skip": "list", after the barrier that follows :meth:`listed_keys`: warp 0 lists the key tiles with a
        key that passes, in order (a ballot a 32 tiles), into ``cvl_tiles``: the tile in bits 0-13, bit 14 set where
        tiles were left out just before it (not before the first: see listed_loop), bit 15 ("bare") where every
        element passes; then ``cvl_cnt``, their count, warp-uniform (a shuffle of lane 0's: ptxas serialises a wgmma
        under a branch it cannot prove uniform)."""
        per, chunks, nt = self.bn // 32, -(-self.N // 32), self.nt
        return [
            "if (threadIdx.x < 32) {  // \"skip\": \"list\": the key tiles to compute", *indent([
                "int count = 0;", "bool before = false;  // whether the tile before this round's first is listed",
                *([f"int last[{self.groups}] = {{{', '.join(['0'] * self.groups)}}};  // \"trim\": "
                                     "each warpgroup's listed tiles, up to its last"] if self.trim else []),
                "#pragma unroll 1", f"for (int t0 = 0; t0 < {nt}; t0 += 32) {{", *indent([
                    "const int t = t0 + (int)threadIdx.x;", "bool keep = false, every = true;",
                    *(["unsigned mine = 0;  // bit w: some row of warpgroup w sees a key of it"] if self.trim else []),
                    "#pragma unroll", f"for (int j = 0; j < {per}; ++j) {{",
                    f"    const unsigned flag = t * {per} + j < {chunks} ? cvl_chunks[t * {per} + j] : 2u;",
                    "    keep = keep || (flag & 1u) != 0;", "    every = every && (flag & 2u) != 0;",
                    *(["    mine |= flag >> 2;"] if self.trim else []), "}",
                    "const unsigned kept = __ballot_sync(0xffffffffu, keep);",
                    "const int at = count + __popc(kept & ((1u << threadIdx.x) - 1u));  // its place in the list",
                    "const bool gap = at > 0 && !(threadIdx.x > 0 ? (kept >> (threadIdx.x - 1)) & 1u : before);",
                    "before = kept >> 31;  // (whether tile t0 + 31 is listed)",
                    f"if (keep) cvl_tiles[at] = (unsigned short)(t | (gap ? {LIST_GAP} : 0) | (every ? {LIST_BARE} : 0));",
                    *(["#pragma unroll", f"for (int w = 0; w < {self.groups}; ++w)",
                       "    last[w] = max(last[w], (int)__reduce_max_sync(0xffffffffu, (mine >> w) & 1u ? at + 1 : 0));"]
                      if self.trim else []),
                    "count += __popc(kept);"]), "}",
                "if (threadIdx.x == 0) cvl_count = count;",
                *(["if (threadIdx.x == 0) {", "#pragma unroll", f"    for (int w = 0; w < {self.groups}; ++w) cvl_mine[w] = last[w];",
                   "}"] if self.trim else [])]),
            "}",
            "__syncthreads();",
            "const int cvl_cnt = __shfl_sync(0xffffffffu, cvl_count, 0);  // the listed tiles: warp-uniform to ptxas",
        ]

    # ------------------------------------------------------------------ the kernel
    def render(self, entry: str) -> Emitted:
        k, s = self.k, self.stages
        body = [
            "extern __shared__ __align__(1024) unsigned char cvl_smem[];",
            f"__shared__ __align__(8) unsigned long long cvl_bars[{1 + 4 * s + self.persistent + self.listed}];",
            *([f"__shared__ volatile unsigned char cvl_votes[{self.vote_ring * self.groups}];  // \"skip\": "
               "the warpgroups' votes on a tile"] if self.masked is not None and not self.listed else []),
            *(self.listed_shared() if self.listed else []),
            "const unsigned sq = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;  // the block's Q rows",
            f"const unsigned sk = sq + {self.q_bytes}u;  // {s} slots of K",
            f"const unsigned sv = sk + {s * self.k_bytes}u;  // {s} slots of V",
            f"const unsigned bars = cvl_smem_addr(cvl_bars);  // Q; K full [{s}]; V full; K empty; V empty"
            + ("; Q empty" if self.persistent else "") + ("; the verdict" if self.listed else ""),
            *([] if self.persistent else [*self.decode(), f"const int m0 = mt * {self.bm};"]),
            *(self.listed_keys() if self.listed else []),
            "if (threadIdx.x == 0) {",
            *[f"    cvl_tma_prefetch({m});" for m in self.maps.values()],
            f"    for (int i = 0; i < {1 + 2 * s}; ++i) cvl_mbar_init(bars + 8 * i, 1u);",
            f"    for (int i = {1 + 2 * s}; i < {1 + 4 * s + self.persistent}; ++i) cvl_mbar_init(bars + 8 * i, {self.groups}u);",
            *([f"    cvl_mbar_init(bars + 8 * {self.verdict}, 1u);"] if self.listed else []),
            "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");",
            "}",
            "__syncthreads();",
            *(self.listed_tiles() if self.listed else []),
            "if (threadIdx.x < 128) {", *indent(self.producer()), "} else {", *indent(self.consumer()), "}",
        ]
        lines = [*k.signature(entry, self.threads), *indent(body), "}"]
        grid = min(self.items, self.blocks) if self.persistent else self.items
        helpers = (cuda_wgmma.HELPERS + cuda_wgmma.TMA_HELPERS + cuda_wgmma.TMA3_HELPERS + cuda_wgmma.WS_HELPERS_OUTLINED_TRAP
                   + BAND_HELPERS + PACK_HELPER + self.wgmma_helpers()
                   + (WG_ALL_HELPER if self.masked is not None and not self.listed else "")
                   + (CONSUMERS_ANY_HELPER if self.listed else ""))
        return Emitted(lines, (grid, 1, 1), (self.threads, 1, 1), self.shared_total(), helpers, (f"-arch={cuda_wgmma.ARCH}",))
