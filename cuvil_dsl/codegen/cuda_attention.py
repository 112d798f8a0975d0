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

Precision: the numerators enter the tensor-core product rounded to f16/bf16 (relative 2^-11 /
2^-8 each, as in FlashAttention); the row sum adds them unrounded, in f32. NaN in a row makes
that row's output NaN; a row whose values are all ``-inf`` gives NaN (0 / 0), as NumPy does.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.cuda_gemm import MMA_HELPERS, Operand, _mma_helper, batch_offset, operand
from cuvil_dsl.codegen.cuda_lang import STORAGE
from cuvil_dsl.codegen.cuda_matmul import BAND_HELPERS, LOG2E
from cuvil_dsl.diagnostics import UserError, error
from cuvil_dsl.passes import configs
from cuvil_dsl.types import DType

THREADS = configs.ATTENTION_THREADS  # block sizes the template takes (16 query rows a warp)
KEY_TILES = (64, 32)  # BN, largest first: the first whose shared memory fits
MAX_DEPTH = configs.ATTENTION_MAX_DEPTH  # Dk the template holds (all of it in shared memory)
MAX_DV_CHUNK = 128  # output columns a block accumulates; wider Dv runs in chunks (S recomputed per chunk)
REGISTER_Q_DEPTH = 128  # Q fragments stay in registers up to this Dk, else ldmatrix from shared memory per tile
PAD = 8  # elements of padding a shared row (16 bytes)

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


def plan_tiles(threads: int, depth: int, dv: int, k_major: bool, arch: str) -> tuple[int, int, int] | None:
    """(BM, BN, threads) that fit the arch's shared memory: the asked threads first, then fewer."""
    for t in [threads] + [x for x in reversed(THREADS) if x < threads]:
        for bn in KEY_TILES:
            if shared_bytes(16 * (t // 32), bn, depth, dv, k_major) <= configs.smem_limit(arch):
                return 16 * (t // 32), bn, t
    return None


class _Attention:
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
        tiles = plan_tiles(k.config.block, self.depth, self.dv, self.kk.k_major, k.arch) if self.depth <= MAX_DEPTH else None
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
        k.config = replace(k.config, block=self.threads)
        if "launch_bounds" not in k.config.overridden:
            k.config = replace(k.config, min_blocks=self.blocks_per_sm())

    def blocks_per_sm(self) -> int:
        """The launch bounds' resident blocks: 128 registers a thread when the accumulators (O and S), the
        Q fragments and about 40 more fit in them, else 255; fewer when shared memory holds fewer."""
        state = 4 * (self.dv // 8) + 4 * (self.bn // 8) + (4 * (self.depth // 16) if self.q_regs else 0)
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
        body = [f"const int c = i * {self.threads} + threadIdx.x;",
                f"const int r = c / {per_row};", f"const int cc = c % {per_row} * {width};",
                f"const int gr = {r0} + r;", f"const int gc = {c0} + cc;",
                f"const bool ok = gr < {r_ext} && gc < {c_ext};",
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
    def q_fragment(self, kq: str) -> tuple[str, str]:
        if self.q.k_major:
            return "cvl_ldsm_x4", f"sq + (wm + (lane / 8) % 2 * 8 + lane % 8) * {self.ldq} + ({kq}) * 16 + lane / 16 * 8"
        return "cvl_ldsm_x4_trans", f"sq + (({kq}) * 16 + lane / 16 * 8 + lane % 8) * {self.ldq} + wm + (lane / 8) % 2 * 8"

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

    def logit(self) -> list[str]:
        """``s``: the softmax's argument at accumulator element ``ACC`` (row ``m``, key ``n``), -inf past M
        or N (the walk's loads are never out of bounds)."""
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
        arg = self.softmax.args[0]
        x = w.value(arg, self.p.layout.maps[arg])
        tests = ([f"m < {self.M}"] if self.M % self.bm else []) + ([f"n < {self.N}"] if self.N % self.bn else [])
        neg_inf = k.lang.literal(-math.inf, DType.F32)
        if not tests:
            return [*lines, f"ACC = {x};"]
        return [f"if ({' && '.join(tests)}) {{", *indent([*lines, f"ACC = {x};"]), f"}} else {{", f"    ACC = {neg_inf};", "}"]

    def s_elements(self, body: list[str]) -> list[str]:
        return ["#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
                "#pragma unroll", "for (int h = 0; h < 2; ++h)",
                "#pragma unroll", "for (int q = 0; q < 2; ++q) {",
                "    const int m = m0 + wm + lane / 4 + h * 8;",
                "    const int n = n0 + ni * 8 + lane % 4 * 2 + q;",
                "    (void)m; (void)n;",
                "    float& ACC = s[ni][h * 2 + q];", *indent(body), "}"]

    def online_softmax(self) -> list[str]:
        """The tile's row maxima (the four lanes of a row together), the rescale of ``l`` and ``o``
        when a maximum grows, and the numerators in place of ``s``."""
        neg_inf = self.k.lang.literal(-math.inf, DType.F32)
        return [
            f"float top[2] = {{{neg_inf}, {neg_inf}}};",
            "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) top[e / 2] = fmaxf(top[e / 2], s[ni][e]);",
            "float base[2], alpha[2];",
            "#pragma unroll", "for (int h = 0; h < 2; ++h) {",
            "    top[h] = fmaxf(top[h], __shfl_xor_sync(0xffffffffu, top[h], 1));",
            "    top[h] = fmaxf(top[h], __shfl_xor_sync(0xffffffffu, top[h], 2));",
            "    top[h] = fmaxf(top[h], row_max[h]);",
            f"    const float bl = __fmul_rn(top[h], {LOG2E});",
            f"    base[h] = top[h] == {neg_inf} ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0",
            # the old sum and outputs are of 2^(x log2 e - old base): scale them to the new base
            "    alpha[h] = row_max[h] == top[h] ? 1.0f",
            f"             : row_max[h] == {neg_inf} ? 0.0f : cvl_ex2(row_base[h] - base[h]);  // nothing to scale yet",
            "    row_max[h] = top[h];", "    row_base[h] = base[h];", "    row_sum[h] *= alpha[h];",
            "}",
            "#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) o[nd][e] *= alpha[e / 2];",
            "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) {",
            f"        s[ni][e] = cvl_ex2(fmaf(s[ni][e], {LOG2E}, -base[e / 2]));",
            "        row_sum[e / 2] += s[ni][e];",
            "    }",
        ]

    def pv(self) -> list[str]:
        """``o += P V`` over the tile's keys: P's A fragments from the numerators, V's B fragments by
        ldmatrix.trans from the tile's stage (rows are keys)."""
        pack = PACK[self.dtype][1]
        addr = f"tv + (j * 16 + (lane / 8) % 2 * 8 + lane % 8) * {self.ldv} + dj * 16 + lane / 16 * 8"
        return [
            "#pragma unroll", f"for (int j = 0; j < {self.ni // 2}; ++j) {{",
            "    unsigned pf[4];",
            f"    pf[0] = cvl_pack_bits({pack}(s[2 * j][0], s[2 * j][1]));",
            f"    pf[1] = cvl_pack_bits({pack}(s[2 * j][2], s[2 * j][3]));",
            f"    pf[2] = cvl_pack_bits({pack}(s[2 * j + 1][0], s[2 * j + 1][1]));",
            f"    pf[3] = cvl_pack_bits({pack}(s[2 * j + 1][2], s[2 * j + 1][3]));",
            "#pragma unroll", f"    for (int dj = 0; dj < {self.nd // 2}; ++dj) {{",
            "        unsigned r[4];", f"        cvl_ldsm_x4_trans(r, {addr});",
            "        const unsigned b0[2] = {r[0], r[1]};", "        const unsigned b1[2] = {r[2], r[3]};",
            "        cvl_mma(o[2 * dj], pf, b0);", "        cvl_mma(o[2 * dj + 1], pf, b1);",
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
            "#pragma unroll", "for (int h = 0; h < 2; ++h) {",
            "    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);",
            "    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);",
            "    row_sum[h] = 1.0f / row_sum[h];  // 1 / 0 = inf: a row all -inf gives 0 * inf = NaN",
            "}",
            "#pragma unroll", "for (int h = 0; h < 2; ++h) {",
            "    const int m = m0 + wm + lane / 4 + h * 8;",
        ]
        pairs = dtype in PACK and self.Dv % 2 == 0
        inner = ["const int d = d0 + nd * 8 + lane % 4 * 2;"]
        if pairs:
            pair, pack = PACK[dtype]
            target = f"reinterpret_cast<{pair}*>({k.names[self.out]} + ({row}) + d)"
            inner.append(f"{'if (d < ' + str(self.Dv) + ') ' if self.Dv % self.dv else ''}*{target} = "
                         f"{pack}(o[nd][h * 2] * row_sum[h], o[nd][h * 2 + 1] * row_sum[h]);")
        else:
            for q in range(2):
                value = f"o[nd][h * 2 + {q}] * row_sum[h]"
                line = f"{k.names[self.out]}[({row}) + d + {q}] = {k.lang.store(value, dtype)};"
                inner.append(f"if (d + {q} < {self.Dv}) {line}" if (self.Dv % self.dv or self.Dv % 2) else line)
        loop = ["#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd) {{", *indent(inner), "}"]
        if guard:
            loop = [f"if ({' && '.join(guard)}) {{", *indent(loop), "}"]
        return out + indent(loop) + ["}"]

    # ------------------------------------------------------------------ the kernel
    def render(self, entry: str) -> Emitted:
        k = self.k
        st = self.st
        batch_shape = self.p.domain[:-2]
        decode = [f"const int mt = blockIdx.x % {self.mt};",
                  f"const int dz = blockIdx.x / {self.mt} % {self.chunks};",
                  f"const int bz = blockIdx.x / {self.mt * self.chunks};"]
        inner = 1
        for d in reversed(range(len(batch_shape))):
            div = f"bz / {inner}" if inner > 1 else "bz"
            decode.append(f"const int c{d} = ({div}) % {batch_shape[d]};")
            inner *= batch_shape[d]
        decode.append("(void)bz;")
        body = [
            "extern __shared__ __align__(16) unsigned char cvl_smem[];",
            f"{st}* const sq = reinterpret_cast<{st}*>(cvl_smem);  // the block's Q rows",
            f"{st}* const sk = sq + {self.q_elems};  // two stages of K",
            f"{st}* const sv = sk + {2 * self.k_elems};  // two stages of V",
            "const int lane = threadIdx.x % 32;",
            "const int wm = threadIdx.x / 32 * 16;  // this warp's rows of the block",
            *decode,
            f"const int m0 = mt * {self.bm};",
            f"const int d0 = dz * {self.dv};",
            f"const {st}* pq = {self.q.pointer} + {batch_offset(k, self.q)};",
            f"const {st}* pk = {self.kk.pointer} + {batch_offset(k, self.kk)};",
            f"const {st}* pv = {self.v.pointer} + {batch_offset(k, self.v)};",
            f"float o[{self.nd}][4];",
            "#pragma unroll", f"for (int nd = 0; nd < {self.nd}; ++nd)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) o[nd][e] = 0.0f;",
            f"float row_max[2] = {{{k.lang.literal(-math.inf, DType.F32)}, {k.lang.literal(-math.inf, DType.F32)}}};",
            "float row_base[2] = {0.0f, 0.0f};",
            "float row_sum[2] = {0.0f, 0.0f};",
            *self.load_q(),
            *self.load_kv("0", "0"),
            "cvl_cp_commit();",
        ]
        load_a, a_addr = self.q_fragment("kq")
        if self.q_regs:
            body += [f"unsigned qf[{self.ks}][4];  // the warp's Q rows, all of Dk",
                     "cvl_cp_wait<0>();", "__syncthreads();",
                     "#pragma unroll", f"for (int kq = 0; kq < {self.ks}; ++kq) {load_a}(qf[kq], {a_addr});"]
        gemm = ["#pragma unroll", f"for (int kq = 0; kq < {self.ks}; ++kq) {{",
                f"    unsigned kf[{self.ni}][2];", *indent(self.k_fragments("tk", "kq"))]
        if self.q_regs:
            gemm += ["#pragma unroll", f"    for (int ni = 0; ni < {self.ni}; ++ni) cvl_mma(s[ni], qf[kq], kf[ni]);", "}"]
        else:
            gemm += ["    unsigned af[4];", f"    {load_a}(af, {a_addr});",
                     "#pragma unroll", f"    for (int ni = 0; ni < {self.ni}; ++ni) cvl_mma(s[ni], af, kf[ni]);", "}"]
        loop = [
            "cvl_cp_wait<0>();", "__syncthreads();  // tile t is in, and every warp is done with tile t - 1",
            f"if (t + 1 < {self.nt}) {{", *indent(self.load_kv("(t + 1) % 2", "t + 1")), "}", "cvl_cp_commit();",
        ]
        loop += [
            f"const {st}* tk = sk + (t % 2) * {self.k_elems};",
            f"const {st}* tv = sv + (t % 2) * {self.v_elems};",
            f"const int n0 = t * {self.bn};",
            f"float s[{self.ni}][4];",
            "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
            "#pragma unroll", "    for (int e = 0; e < 4; ++e) s[ni][e] = 0.0f;",
            *gemm,
            *self.s_elements(self.logit()),
            *self.online_softmax(),
            *self.pv(),
        ]
        body += [f"for (int t = 0; t < {self.nt}; ++t) {{", *indent(loop), "}", *self.finish()]
        lines = [*k.signature(entry, self.threads), *indent(body), "}"]
        shared = 2 * (self.q_elems + 2 * self.k_elems + 2 * self.v_elems)
        grid = self.batch * self.chunks * self.mt
        helpers = MMA_HELPERS + _mma_helper(self.dtype) + BAND_HELPERS + PACK_HELPER
        return Emitted(lines, (grid, 1, 1), (self.threads, 1, 1), shared, helpers)


def render(k: CudaKernel, entry: str) -> Emitted:
    return _Attention(k).render(entry)
