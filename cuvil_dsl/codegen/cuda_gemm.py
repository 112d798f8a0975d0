"""GEMM main loops: tensor cores (``mma.sync``) and SIMT (FFMA/DFMA), behind one interface.

Both engines compute one BM x BN tile of ``A @ B`` per *tile visit* and leave it in registers;
the kernel templates (:mod:`~cuvil_dsl.codegen.cuda_matmul`) decide how many tiles a block
visits (one for a GEMM, every column tile of a row band twice for GEMM + softmax) and what
happens to each accumulator element. The k loop of all visits is one flat sequence of *steps*,
so loads for the next tile overlap the epilogue of the current one.

* :class:`MmaEngine` (f16/bf16, and f32 with ``tf32``): operand tiles go global -> shared by
  16-byte ``cp.async`` (zero-filled past M, N or K) in a 2-4 stage pipeline; fragments come
  from shared memory by ``ldmatrix`` (``.trans`` for operands stored MN-contiguous, such as
  ``k`` in ``q @ k.T`` read in place); ``mma.sync.m16n8k16`` (``m16n8k8.tf32``) accumulates
  in f32. Operands whose rows are not 16-byte aligned are copied element by element instead.
* :class:`SimtEngine` (f32 without tf32, f64, and every dtype before sm_80): register-staged
  double buffering, each thread a TM x TN block of outputs strided across the tile so that
  loads and stores coalesce; full-precision fused multiply-adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cuvil_dsl.codegen.cuda import CudaKernel, indent
from cuvil_dsl.codegen.cuda_lang import STORAGE
from cuvil_dsl.passes import configs
from cuvil_dsl.types import DType

StepExpr = Callable[[str], str]  # C expression of a step variable -> a coordinate


@dataclass(frozen=True)
class Operand:
    """One GEMM operand as the buffer it is read from (views peeled, batch broadcast)."""

    role: str  # "a" (extent M) or "b" (extent N)
    buffer: str  # the plan buffer's value id
    pointer: str  # its C parameter
    dtype: DType
    extent: int  # M or N
    depth: int  # K
    k_major: bool  # K is the contiguous axis
    stride_mn: int
    stride_k: int
    batch: tuple[tuple[int, int], ...]  # (domain axis, element stride) per broadcast-free batch axis

    @property
    def contiguous(self) -> int:
        return self.depth if self.k_major else self.extent


def operand(k: CudaKernel, matmul: str, which: int) -> Operand:
    """Follow ``@``'s operand through ``.T`` views to its buffer, naming each buffer axis's role."""
    op = k.p.ops[matmul]
    value = op.args[which]
    shape = k.p.types[value].shape
    out_batch = len(k.p.domain) - 2
    roles: list = [None if d == 1 else j + out_batch - (len(shape) - 2) for j, d in enumerate(shape[:-2])]
    roles += ["mn", "k"] if which == 0 else ["k", "mn"]
    while value in k.p.ops and k.p.ops[value].op == "transpose":
        roles[-1], roles[-2] = roles[-2], roles[-1]
        value = k.p.ops[value].args[0]
    dims, strides = k.p.shape(value), k.p.strides(value)
    stride = {r: s for r, s, d in zip(roles, strides, dims) if isinstance(r, str)}
    depth = next(d for r, d in zip(roles, dims) if r == "k")
    extent = next(d for r, d in zip(roles, dims) if r == "mn")
    k_major = stride["k"] == 1 if depth > 1 else stride["mn"] != 1
    batch = tuple((r, s) for r, s, d in zip(roles, strides, dims) if isinstance(r, int) and d > 1)
    return Operand("a" if which == 0 else "b", value, k.names[value], k.dtype(value), extent, depth, k_major,
                   stride["mn"], stride["k"], batch)


def zero_of(dtype: DType) -> str:
    """A zero of ``dtype``'s storage type (padding for tiles that overhang M, N or K)."""
    return {DType.F16: "__ushort_as_half(0)", DType.BF16: "__ushort_as_bfloat16(0)", DType.F64: "0.0"}.get(dtype, "0.0f")


def batch_offset(k: CudaKernel, o: Operand) -> str:
    return " + ".join(f"({k.index_t})c{d} * {k.stride_literal(s)}" for d, s in o.batch) or "0"


def _unrolled(count: int, threads: int, body: Callable[[str], list[str]]) -> list[str]:
    """Spread ``count`` work items over the block's threads (``c`` is the item index)."""
    iters = -(-count // threads)
    inner = [f"const int c = i * {threads} + threadIdx.x;"]
    inner += [f"if (c < {count}) {{", *indent(body("c")), "}"] if count % threads else body("c")
    return ["#pragma unroll", f"for (int i = 0; i < {iters}; ++i) {{", *indent(inner), "}"]


MMA_HELPERS = r"""
__device__ __forceinline__ unsigned cvl_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cvl_cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(cvl_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cvl_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cvl_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
__device__ __forceinline__ void cvl_ldsm_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(cvl_smem_addr(p)) : "memory");
}
__device__ __forceinline__ void cvl_ldsm_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(cvl_smem_addr(p)) : "memory");
}
__device__ __forceinline__ unsigned cvl_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
"""

_MMA = {
    DType.F16: "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    DType.BF16: "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    DType.F32: "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
}


def mma_helper(dtype: DType) -> str:
    return f"""
__device__ __forceinline__ void cvl_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {{
    asm volatile("{_MMA[dtype]} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}}
"""


class MmaEngine:
    """Tensor-core tiles; each warp owns a warp_m x warp_n block of the BM x BN tile."""

    options: tuple[str, ...] = ()  # compiler options a kernel with this engine needs

    def __init__(self, k: CudaKernel, a: Operand, b: Operand):
        c = k.config
        self.k, self.a, self.b = k, a, b
        self.bm, self.bn, self.bk, self.threads = c.tile_m, c.tile_n, c.tile_k, c.block
        self.w = configs.warp_layout(self.bm, self.bn, self.threads)
        assert self.w is not None, (self.bm, self.bn, self.threads)
        self.dtype = a.dtype
        self.item = a.dtype.itemsize
        self.storage = STORAGE[a.dtype]
        self.kstep = 16 if self.item == 2 else 8
        self.mi, self.ni = self.w.warp_m // 16, self.w.warp_n // 8
        self.stages = configs.mma_stages(self.bm, self.bn, self.bk, self.item, k.arch)
        self.row_lanes = 4
        self.slots = self.mi * 2
        self.warps_n = self.w.warps_n  # warps that share the rows of a tile (each its own columns)

    # ------------------------------------------------------------------ shared memory
    def ld(self, o: Operand) -> int:
        rows = self.bm if o.role == "a" else self.bn
        return self.bk + 16 // self.item if o.k_major else rows + 8

    def tile_elems(self, o: Operand) -> int:
        rows = self.bm if o.role == "a" else self.bn
        return configs.operand_tile_elems(rows, self.bk, self.item, o.k_major)

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.tile_elems(self.a) + self.tile_elems(self.b)) * self.item

    def helpers(self) -> str:
        return MMA_HELPERS + mma_helper(self.dtype)

    def setup(self) -> list[str]:
        w = self.w
        return [
            "extern __shared__ __align__(16) unsigned char cvl_smem[];",
            f"{self.storage}* const sa = reinterpret_cast<{self.storage}*>(cvl_smem);",
            f"{self.storage}* const sb = sa + {self.stages * self.tile_elems(self.a)};",
            "const int lane = threadIdx.x % 32;",
            f"const int wm = (threadIdx.x / 32) / {w.warps_n} * {w.warp_m};",
            f"const int wn = (threadIdx.x / 32) % {w.warps_n} * {w.warp_n};",
            f"float acc[{self.mi}][{self.ni}][4];",
        ]

    def zero(self) -> list[str]:
        return ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                "#pragma unroll", f"    for (int ni = 0; ni < {self.ni}; ++ni)",
                "#pragma unroll", "        for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;"]

    # ------------------------------------------------------------------ loads
    def load(self, o: Operand, stage: str, mn0: str, k0: str, base: str) -> list[str]:
        """Copy one operand tile (rows mn0.., depth k0..) of step into shared stage ``stage``."""
        rows = self.bm if o.role == "a" else self.bn
        tile_rows, tile_cols = (rows, self.bk) if o.k_major else (self.bk, rows)
        smem = "sa" if o.role == "a" else "sb"
        ld, te = self.ld(o), self.tile_elems(o)
        chunk = 16 // self.item
        use_async = (o.contiguous * self.item) % 16 == 0
        width = chunk if use_async else 1
        per_row = tile_cols // width
        stride_mn, stride_k = self.k.stride_literal(o.stride_mn), self.k.stride_literal(o.stride_k)

        def body(c: str) -> list[str]:
            lines = [f"const int r = {c} / {per_row};", f"const int cc = {c} % {per_row} * {width};"]
            mn, kk = ("r", "cc") if o.k_major else ("cc", "r")
            lines += [f"const int gmn = {mn0} + {mn};", f"const int gk = {k0} + {kk};",
                      f"const bool ok = gmn < {o.extent} && gk < {o.depth};",
                      f"{self.storage}* dst = {smem} + ({stage}) * {te} + r * {ld} + cc;"]
            src = f"{base} + ({self.k.index_t})gmn * {stride_mn} + ({self.k.index_t})gk * {stride_k}"
            if use_async:
                lines.append(f"cvl_cp_async16(dst, ok ? {src} : {base}, ok);")
            else:
                lines.append(f"*dst = ok ? *({src}) : {zero_of(self.dtype)};")
            return lines

        return _unrolled(tile_rows * per_row, self.threads, body)

    # ------------------------------------------------------------------ math
    def compute(self, stage: str) -> list[str]:
        a, b = self.a, self.b
        sa = f"sa + ({stage}) * {self.tile_elems(a)}"
        sb = f"sb + ({stage}) * {self.tile_elems(b)}"
        out = [f"const {self.storage}* ta = {sa};", f"const {self.storage}* tb = {sb};",
               "#pragma unroll", f"for (int kk = 0; kk < {self.bk}; kk += {self.kstep}) {{",
               f"    unsigned af[{self.mi}][4];", f"    unsigned bf[{self.ni}][2];"]
        body = self._fragments_b16() if self.item == 2 else self._fragments_tf32()
        out += indent(body)
        out += ["#pragma unroll", f"    for (int mi = 0; mi < {self.mi}; ++mi)", "#pragma unroll",
                f"        for (int ni = 0; ni < {self.ni}; ++ni) cvl_mma(acc[mi][ni], af[mi], bf[ni]);", "}"]
        return out

    def a_fragment(self, ta: str, kk: str) -> tuple[str, str]:
        """(ldmatrix call, address) of the 16 x 16 A fragment ``mi`` at depth ``kk`` (16-bit operands)."""
        lda = self.ld(self.a)
        if self.a.k_major:
            return "cvl_ldsm_x4", f"{ta} + (wm + mi * 16 + (lane / 8) % 2 * 8 + lane % 8) * {lda} + {kk} + lane / 16 * 8"
        return "cvl_ldsm_x4_trans", f"{ta} + ({kk} + lane / 16 * 8 + lane % 8) * {lda} + wm + mi * 16 + (lane / 8) % 2 * 8"

    def b_fragments(self, tb: str, kk: str) -> list[str]:
        """Fill ``bf[ni][2]`` (every n fragment of the warp) at depth ``kk``, two per ldmatrix.x4."""
        ldb = self.ld(self.b)
        if self.b.k_major:
            b_addr = f"{tb} + (wn + nj * 16 + lane / 16 * 8 + lane % 8) * {ldb} + {kk} + (lane / 8) % 2 * 8"
        else:
            b_addr = f"{tb} + ({kk} + (lane / 8) % 2 * 8 + lane % 8) * {ldb} + wn + nj * 16 + lane / 16 * 8"
        load_b = "cvl_ldsm_x4" if self.b.k_major else "cvl_ldsm_x4_trans"
        return ["#pragma unroll", f"for (int nj = 0; nj < {self.ni // 2}; ++nj) {{",
                "    unsigned r[4];", f"    {load_b}(r, {b_addr});",
                "    bf[2 * nj][0] = r[0]; bf[2 * nj][1] = r[1];",
                "    bf[2 * nj + 1][0] = r[2]; bf[2 * nj + 1][1] = r[3];", "}"]

    def _fragments_b16(self) -> list[str]:
        load_a, a_addr = self.a_fragment("ta", "kk")
        return ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi) {load_a}(af[mi], {a_addr});",
                *self.b_fragments("tb", "kk")]

    def _fragments_tf32(self) -> list[str]:
        a, b = self.a, self.b
        lda, ldb = self.ld(a), self.ld(b)

        def at(o: Operand, t: str, ld: int, mn: str, kk: str) -> str:
            return f"{t}[({mn}) * {ld} + {kk}]" if o.k_major else f"{t}[({kk}) * {ld} + {mn}]"

        g, t = "lane / 4", "lane % 4"
        out = ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi) {{"]
        for q, (dm, dk) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))):
            out.append(f"    af[mi][{q}] = cvl_tf32({at(a, 'ta', lda, f'wm + mi * 16 + {g} + {dm}', f'kk + {t} + {dk}')});")
        out += ["}", "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni) {{"]
        for q, dk in enumerate((0, 4)):
            out.append(f"    bf[ni][{q}] = cvl_tf32({at(b, 'tb', ldb, f'wn + ni * 8 + {g}', f'kk + {t} + {dk}')});")
        return out + ["}"]

    # ------------------------------------------------------------------ the step loop
    def main_loop(self, steps: int, k0: StepExpr, n0: StepExpr, m0: str, bases: tuple[str, str],
                  after_step: list[str]) -> list[str]:
        """All steps; ``after_step`` runs after each step's math (the template guards it)."""
        s = self.stages

        def load(stage: str, step: str) -> list[str]:
            return self.load(self.a, stage, m0, k0(step), bases[0]) + self.load(self.b, stage, n0(step), k0(step), bases[1])

        out = []
        for i in range(s - 1):
            out += [f"if ({i} < {steps}) {{", *indent(load(str(i), str(i))), "}", "cvl_cp_commit();"]
        body = [f"cvl_cp_wait<{s - 2}>();", "__syncthreads();",
                f"if (step + {s - 1} < {steps}) {{",
                *indent(load(f"(step + {s - 1}) % {s}", f"(step + {s - 1})")), "}",
                "cvl_cp_commit();", "{", *indent(self.compute(f"step % {s}")), "}", *after_step]
        out += [f"for (int step = 0; step < {steps}; ++step) {{", *indent(body), "}"]
        return out

    def slot_row(self, slot: str) -> str:
        """The tile row of row slot ``slot`` of this thread."""
        return f"(wm + ({slot}) / 2 * 16 + ({slot}) % 2 * 8 + lane / 4)"

    def column_warp(self) -> str:
        return f"(threadIdx.x / 32 % {self.w.warps_n})"

    # ------------------------------------------------------------------ accumulator elements
    def elements(self, m0: str, n0: str, body: list[str]) -> list[str]:
        """``body`` once per accumulator element, with ``m``, ``n``, ``ACC`` and ``SLOT`` defined."""
        return ["#pragma unroll", f"for (int mi = 0; mi < {self.mi}; ++mi)",
                "#pragma unroll", f"for (int ni = 0; ni < {self.ni}; ++ni)",
                "#pragma unroll", "for (int h = 0; h < 2; ++h)",
                "#pragma unroll", "for (int q = 0; q < 2; ++q) {",
                f"    const int m = {m0} + wm + mi * 16 + lane / 4 + h * 8;",
                f"    const int n = {n0} + wn + ni * 8 + lane % 4 * 2 + q;",
                "    const int slot = mi * 2 + h;", "    float& ACC = acc[mi][ni][h * 2 + q];",
                *indent(body), "}"]


class SimtEngine:
    """CUDA-core tiles: each thread a TM x TN block strided by (TY, TX) over the BM x BN tile."""

    options: tuple[str, ...] = ()  # compiler options a kernel with this engine needs

    def __init__(self, k: CudaKernel, a: Operand, b: Operand):
        c = k.config
        self.k, self.a, self.b = k, a, b
        self.bm, self.bn, self.bk, self.threads = c.tile_m, c.tile_n, c.tile_k, c.block
        self.t = configs.thread_layout(self.bm, self.bn, self.threads)
        assert self.t is not None, (self.bm, self.bn, self.threads)
        self.ctype = k.lang.ctype(a.dtype)
        self.fma = "fma" if a.dtype is DType.F64 else "fmaf"
        self.row_lanes = self.t.tx
        self.slots = self.t.tm
        self.shared_bytes = 0
        self.warps_n = 1  # a row's TX threads are lanes of one warp

    def helpers(self) -> str:
        return ""

    def setup(self) -> list[str]:
        t = self.t
        return [f"__shared__ {self.ctype} sa[2][{self.bk}][{self.bm}];",
                f"__shared__ {self.ctype} sb[2][{self.bk}][{self.bn}];",
                f"const int tx = threadIdx.x % {t.tx};", f"const int ty = threadIdx.x / {t.tx};",
                f"{self.ctype} acc[{t.tm}][{t.tn}];",
                f"{STORAGE[self.a.dtype]} ra[{self._per_thread(self.bm)}];",
                f"{STORAGE[self.b.dtype]} rb[{self._per_thread(self.bn)}];"]

    def _per_thread(self, rows: int) -> int:
        return -(-rows * self.bk // self.threads)

    def zero(self) -> list[str]:
        t = self.t
        return ["#pragma unroll", f"for (int i = 0; i < {t.tm}; ++i)",
                "#pragma unroll", f"    for (int j = 0; j < {t.tn}; ++j) acc[i][j] = 0;"]

    def _index(self, o: Operand, c: str) -> list[str]:
        rows = self.bm if o.role == "a" else self.bn
        # consecutive threads walk the operand's contiguous axis, so loads coalesce
        if o.k_major:
            return [f"const int kk = {c} % {self.bk};", f"const int mm = {c} / {self.bk};"]
        return [f"const int mm = {c} % {rows};", f"const int kk = {c} / {rows};"]

    def load_regs(self, o: Operand, mn0: str, k0: str, base: str) -> list[str]:
        rows = self.bm if o.role == "a" else self.bn
        reg = "ra" if o.role == "a" else "rb"
        stride_mn, stride_k = self.k.stride_literal(o.stride_mn), self.k.stride_literal(o.stride_k)

        def body(c: str) -> list[str]:
            return self._index(o, c) + [
                f"const int gmn = {mn0} + mm;", f"const int gk = {k0} + kk;",
                f"{reg}[i] = (gmn < {o.extent} && gk < {o.depth}) ? "
                f"{base}[({self.k.index_t})gmn * {stride_mn} + ({self.k.index_t})gk * {stride_k}] : "
                f"{zero_of(o.dtype)};"]

        return _unrolled(rows * self.bk, self.threads, body)

    def store_smem(self, o: Operand, stage: str) -> list[str]:
        rows = self.bm if o.role == "a" else self.bn
        reg, smem = ("ra", "sa") if o.role == "a" else ("rb", "sb")
        value = self.k.lang.load(f"{reg}[i]", o.dtype)
        return _unrolled(rows * self.bk, self.threads,
                         lambda c: self._index(o, c) + [f"{smem}[{stage}][kk][mm] = {value};"])

    def compute(self, stage: str) -> list[str]:
        t = self.t
        return ["#pragma unroll", f"for (int kk = 0; kk < {self.bk}; ++kk) {{",
                f"    {self.ctype} fa[{t.tm}], fb[{t.tn}];",
                "#pragma unroll", f"    for (int i = 0; i < {t.tm}; ++i) fa[i] = sa[{stage}][kk][ty + i * {t.ty}];",
                "#pragma unroll", f"    for (int j = 0; j < {t.tn}; ++j) fb[j] = sb[{stage}][kk][tx + j * {t.tx}];",
                "#pragma unroll", f"    for (int i = 0; i < {t.tm}; ++i)",
                "#pragma unroll", f"        for (int j = 0; j < {t.tn}; ++j) acc[i][j] = {self.fma}(fa[i], fb[j], acc[i][j]);",
                "}"]

    def main_loop(self, steps: int, k0: StepExpr, n0: StepExpr, m0: str, bases: tuple[str, str],
                  after_step: list[str]) -> list[str]:
        def load(step: str) -> list[str]:
            return self.load_regs(self.a, m0, k0(step), bases[0]) + self.load_regs(self.b, n0(step), k0(step), bases[1])

        def store(stage: str) -> list[str]:
            return self.store_smem(self.a, stage) + self.store_smem(self.b, stage)

        out = ["{", *indent(load("0") + store("0")), "}", "__syncthreads();"]
        body = [f"if (step + 1 < {steps}) {{", *indent(load("step + 1")), "}",
                "{", *indent(self.compute("step % 2")), "}",
                f"if (step + 1 < {steps}) {{", *indent(store("(step + 1) % 2")), "}",
                "__syncthreads();", *after_step]
        return out + [f"for (int step = 0; step < {steps}; ++step) {{", *indent(body), "}"]

    def elements(self, m0: str, n0: str, body: list[str]) -> list[str]:
        t = self.t
        return ["#pragma unroll", f"for (int i = 0; i < {t.tm}; ++i)",
                "#pragma unroll", f"for (int j = 0; j < {t.tn}; ++j) {{",
                f"    const int m = {m0} + ty + i * {t.ty};", f"    const int n = {n0} + tx + j * {t.tx};",
                "    const int slot = i;", f"    {self.ctype}& ACC = acc[i][j];",
                *indent(body), "}"]


def engine(k: CudaKernel, a: Operand, b: Operand):
    """Tensor cores where the dtype, arch and tf32 setting allow, else CUDA cores."""
    if configs.uses_tensor_cores(a.dtype, k.arch, k.tf32):
        return MmaEngine(k, a, b)
    return SimtEngine(k, a, b)
