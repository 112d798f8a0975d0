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


def plain_engine(k, a, b, blocks: Callable[[int, int], int]) -> "WgmmaEngine | None":
    """The wgmma engine for a plain GEMM of :class:`~cuvil_dsl.codegen.cuda.CudaKernel` ``k``, or
    None (then ``mma.sync`` or SIMT runs it). ``blocks(bm, bn)``: blocks a launch with that tile takes.

    Rule: target sm_90 or sm_90a, f16/bf16 operands whose rows (and batch strides) keep 16-byte
    alignment (:func:`supported`), and no spec override of the tile, block, launch bounds or
    registers (those describe the mma.sync template and are checked against it). Tile: 128 x 256
    with 4 stages and one wgmma group in flight when the launch gives at least two blocks per SM;
    else 128 x 128, with 3 stages and none in flight (99 KiB: two blocks resident per SM) when
    there is more than one wave, or 4 stages and one in flight when one wave covers the launch
    (H200, gelu(A @ B + bias) f16: 4096^3 253 us for 128x256 vs 274/307 us for 128x128 s3/s4
    and 581 us for mma.sync; 1024 x 2048 x 512 16.3 us for 128x128 s4 vs 25.1 us for 128x256)."""
    if not WGMMA or k.arch not in WGMMA_ARCHS or _OVERRIDES & set(k.config.overridden):
        return None
    if any(stride % 8 for o in (a, b) for _axis, stride in getattr(o, "batch", ())):
        return None  # a batch's operand would not start 16-byte aligned
    if blocks(128, 256) >= 2 * k.sm_count:
        bm, bn, stages, pending = 128, 256, 4, 1
    elif blocks(128, 128) > k.sm_count:
        bm, bn, stages, pending = 128, 128, 3, 0
    else:
        bm, bn, stages, pending = 128, 128, 4, 1
    if supported(a, b, bm, bn) is not None:
        return None
    return WgmmaEngine(a, b, bm=bm, bn=bn, stages=stages, pending=pending, index_t=k.index_t)


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
        return HELPERS + self._mma_helper()

    def instruction(self) -> str:
        t = "f16" if self.dtype is DType.F16 else "bf16"
        return f"wgmma.mma_async.sync.aligned.m64n{self.bn}k16.f32.{t}.{t}"

    def _mma_helper(self) -> str:
        n = self.regs
        regs = ", ".join(f"%{i}" for i in range(n))
        ta, tb = int(not self.a.k_major), int(not self.b.k_major)
        outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
        return f"""
// D (64 x {self.bn}, f32) += A (64 x 16, descriptor) * B (16 x {self.bn}, descriptor); trans-a {ta}, trans-b {tb}
__device__ __forceinline__ void cvl_wgmma(float (&d)[{n}], unsigned long long da, unsigned long long db) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n"
                 "{self.instruction()} {{{regs}}}, %{n}, %{n + 1}, p, 1, 1, {ta}, {tb};\\n}}\\n"
                 : {outs}
                 : "l"(da), "l"(db), "n"(1));
}}
// Pins the accumulators between wgmma's asynchronous writes and ordinary reads or writes.
__device__ __forceinline__ void cvl_wgmma_pin(float (&d)[{n}]) {{
#pragma unroll
    for (int i = 0; i < {n}; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}}
"""

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
        ]

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
        assert chunks % self.threads == 0 and self.threads % per_row == 0, (chunks, self.threads, per_row)
        rp = self.threads // per_row  # tile rows per pass of the block
        smem = "sa" if o.role == "a" else "sb"
        it = self.index_t
        lines = ["{", f"    const int r0 = (int)(threadIdx.x / {per_row}u);",
                 f"    const int cc = (int)(threadIdx.x % {per_row}u) * 8;",
                 "#pragma unroll", f"    for (int i = 0; i < {chunks // self.threads}; ++i) {{",
                 f"        const int r = r0 + i * {rp};"]
        mn, kk = ("r", "cc") if o.k_major else ("cc", "r")
        low3 = "(r0 & 7)" if rp % 8 == 0 else None
        offset = self._offset(o, mn, kk, low3)
        # tiles never start past the ends, so an extent that is a multiple of the tile needs no test
        checks = ([f"gmn < {o.extent}"] if o.extent % rows else []) + ([f"gk < {o.depth}"] if o.depth % self.bk else [])
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


def _indent(lines: Sequence[str], by: str = "    ") -> list[str]:
    return [by + line if line else line for line in lines]


# ---------------------------------------------------------------------- a standalone kernel
@dataclass(frozen=True)
class StandaloneKernel:
    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    engine: WgmmaEngine


def gemm_bias_gelu_source(M: int, N: int, K: int, *, entry: str = "gemm_bias_gelu_wgmma", bm: int = 128,
                          bn: int = 256, stages: int = 4, pending: int = 1, b_k_major: bool = False,
                          swap_mn_offsets: bool = False, dtype: DType = DType.F16) -> StandaloneKernel:
    """``y = gelu(a @ b + bias)`` rounded to ``dtype``: a [M, K] row-major, b [K, N] row-major (or
    [N, K] when ``b_k_major``), bias [N]; the shape of the kernel ``_GemmKernel.render_plain`` makes,
    with this engine in place of :class:`MmaEngine`."""
    a = WgmmaOperand("a", "a", dtype, M, K, True, K, 1)
    b = (WgmmaOperand("b", "b", dtype, N, K, True, K, 1) if b_k_major
         else WgmmaOperand("b", "b", dtype, N, K, False, 1, N))
    index_t = "long long" if max(M * K, K * N, M * N) > 2**30 else "int"
    eng = WgmmaEngine(a, b, bm=bm, bn=bn, stages=stages, pending=pending, index_t=index_t,
                      swap_mn_offsets=swap_mn_offsets)
    mt, nt, kt = -(-M // bm), -(-N // bn), -(-K // eng.bk)
    st = eng.storage
    to_f = "__half2float" if dtype is DType.F16 else "__bfloat162float"
    from_f = "__float2half_rn" if dtype is DType.F16 else "__float2bfloat16_rn"
    body = ["(void)slot;", f"if (m < {M} && n < {N}) {{",
            f"    const float x = ACC + {to_f}(bias[n]);",
            "    const float g = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));",
            f"    y[({index_t})m * {N} + n] = {from_f}(g);", "}"]
    lines = [
        f"extern \"C\" __global__ void __launch_bounds__({eng.threads}, 1)",
        f"{entry}(const {st}* __restrict__ a, const {st}* __restrict__ b, const {st}* __restrict__ bias,",
        f"    {st}* __restrict__ y) {{",
    ]
    inner = eng.setup() + [
        f"const int nt = blockIdx.x % {nt};", f"const int mt = blockIdx.x / {nt};",
        f"const int m0 = mt * {bm};", f"const int n0 = nt * {bn};",
    ] + eng.zero()
    inner += eng.main_loop(kt, lambda s: f"({s}) * {eng.bk}", lambda s: "n0", "m0", ("a", "b"), [])
    inner += eng.elements("m0", "n0", body)
    lines += _indent(inner) + ["}"]
    header = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
    source = header + eng.helpers() + "\n" + "\n".join(lines) + "\n"
    return StandaloneKernel(source, entry, (mt * nt, 1, 1), (eng.threads, 1, 1), eng.shared_bytes, eng)
