// cuvil-dsl kernel flash (attention) of pipeline attention, domain [4, 64, 128]
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// NumPy semantics: maximum/minimum/relu propagate NaN (fmaxf would drop it).
__device__ __forceinline__ float cvl_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ double cvl_max(double a, double b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ int cvl_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ float cvl_min(float a, float b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ double cvl_min(double a, double b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ int cvl_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ float cvl_relu(float x) { return cvl_max(x, 0.0f); }
__device__ __forceinline__ double cvl_relu(double x) { return cvl_max(x, 0.0); }
__device__ __forceinline__ int cvl_relu(int x) { return x > 0 ? x : 0; }

// i32 wraps modulo 2^32: compute in unsigned, where overflow is defined.
__device__ __forceinline__ int cvl_wrap_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int cvl_wrap_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ int cvl_wrap_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ int cvl_wrap_neg(int a) { return (int)(0u - (unsigned)a); }
__device__ __forceinline__ int cvl_abs(int a) { return a < 0 ? cvl_wrap_neg(a) : a; }

// The language's formulas (LANGUAGE.md section 5), in the compute type.
__device__ __forceinline__ float cvl_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double cvl_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ float cvl_silu(float x) { return x * cvl_sigmoid(x); }
__device__ __forceinline__ double cvl_silu(double x) { return x * cvl_sigmoid(x); }
// gelu(x) = x * Phi(x), Phi(x) = erfc(-x / sqrt(2)) / 2; for z = |x| / sqrt(2), erfc(z) = t * exp(P(t) - z^2)
// with t = 1 / (1 + z / 2) (the Chebyshev fit in Numerical Recipes' erfcc, relative error below 1.2e-7 for
// all z >= 0). Phi(-|x|) = t * 2^(P(t) log2(e) - 1 - z^2 log2(e)): the fit's coefficients are stored times
// log2(e), the constant one less (the halving), and z^2 log2(e) is |x| * (|x| log2(e) / 2): one reciprocal
// and one exp2 on the MUFU, 11 FMA/FMUL. Against float64, relative error below 5e-7 for |x| < 1, 2e-6 down
// to x = -4, 2e-5 below (0.5 x (1 + erff) loses every digit there, to the cancellation in 1 + erf);
// tests/codegen/test_cuda_lang.py emulates it.
__device__ __forceinline__ float cvl_gelu(float x) {
    const float a = fabsf(x);
    float t, e;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(a, 0.35355339059327373f, 1.0f)));
    float p = fmaf(t, 0.246517298f, -1.18611495f);
    p = fmaf(t, p, 2.14747446f);
    p = fmaf(t, p, -1.63775315f);
    p = fmaf(t, p, 0.402321582f);
    p = fmaf(t, p, -0.26875686f);
    p = fmaf(t, p, 0.139630057f);
    p = fmaf(t, p, 0.539700616f);
    p = fmaf(t, p, 1.4427292f);
    p = fmaf(t, p, -2.82574822f);
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(-a * 0.72134752044448169f, a, p)));
    const float h = t * e;  // Phi(-|x|); NaN in, NaN out; gelu(-inf) is NaN as 0.5 x (1 + erf) is
    return x * (x > 0.0f ? 1.0f - h : h);
}
__device__ __forceinline__ double cvl_gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.7071067811865476)); }
__device__ __forceinline__ float cvl_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ double cvl_gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Rounding to a half type and back, round to nearest even, from any compute type.
__device__ __forceinline__ float cvl_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float cvl_f16(double x) { return __half2float(__double2half(x)); }
__device__ __forceinline__ float cvl_f16(int x) { return __half2float(__int2half_rn(x)); }
__device__ __forceinline__ float cvl_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float cvl_bf16(double x) { return __bfloat162float(__double2bfloat16(x)); }
__device__ __forceinline__ float cvl_bf16(int x) { return __bfloat162float(__int2bfloat16_rn(x)); }

// Vector access: N elements as 16-byte (or narrower) transactions; both sides aligned.
template <int BYTES> struct cvl_word;
template <> struct cvl_word<16> { typedef uint4 type; };
template <> struct cvl_word<8> { typedef uint2 type; };
template <> struct cvl_word<4> { typedef unsigned int type; };
template <> struct cvl_word<2> { typedef unsigned short type; };
template <typename T, int N>
__device__ __forceinline__ void cvl_copy_vec(T* dst, const T* src) {
    constexpr int BYTES = N * (int)sizeof(T);
    constexpr int CHUNK = BYTES >= 16 ? 16 : BYTES;
    typedef typename cvl_word<CHUNK>::type W;
#pragma unroll
    for (int c = 0; c < BYTES / CHUNK; ++c) reinterpret_cast<W*>(dst)[c] = reinterpret_cast<const W*>(src)[c];
}

// Warp reductions by butterfly shuffles: every lane ends with the result.
template <typename T> __device__ __forceinline__ T cvl_warp_sum(T v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ int cvl_warp_sum(int v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v = cvl_wrap_add(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <typename T> __device__ __forceinline__ T cvl_warp_max(T v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v = cvl_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <typename T> __device__ __forceinline__ T cvl_warp_min(T v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v = cvl_min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

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
         | ((unsigned long long)1 << 62);
}

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

// box (c0, c1, c2) of a three-dimensional tensor map (c2: the batch) -> shared memory at dst, as cvl_tma_2d
__device__ __forceinline__ void cvl_tma_3d(unsigned dst, const cvl_tensor_map& map, int c0, int c1, int c2,
                                           unsigned bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

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
__device__ __noinline__ void cvl_hang() { __trap(); }
// waits until the phase of parity `parity` of bar completed; traps after about 2^31 cycles
__device__ __forceinline__ void cvl_mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    if (done) return;
    const long long t0 = clock64();
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (!done && clock64() - t0 > (1ll << 31)) cvl_hang();
    } while (!done);
}

// 2^x by the MUFU (relative error below 2^-21; -inf -> 0, NaN -> NaN); subnormal results flush to 0.
__device__ __forceinline__ float cvl_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <typename T> __device__ __forceinline__ unsigned cvl_pack_bits(T v) {
    return *reinterpret_cast<unsigned*>(&v);  // a __half2 / __nv_bfloat162 as its 32 bits
}

// S (64 x 64, f32) = or += Q (64 x 16, descriptor, K-major) * K^T (16 x 64, descriptor, K-major)
template <int ACCUMULATE>
__device__ __forceinline__ void cvl_wgmma_qk(float (&d)[8][4], unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db), "n"(ACCUMULATE));
}
// O (64 x 64, f32) += P (64 x 16, registers) * V (16 x 64, descriptor, MN-major: trans-b)
__device__ __forceinline__ void cvl_wgmma_pv(float (&d)[8][4], const unsigned (&a)[4], unsigned long long db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// Pins registers that an asynchronous wgmma reads or writes: the compiler keeps them (and their values)
// up to this point, after the wait.
template <int N> __device__ __forceinline__ void cvl_pin(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e]) :: "memory");
}
template <int N> __device__ __forceinline__ void cvl_pin(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e]) :: "memory");
}

// "skip": "list": true in every consumer thread when `c` is true in any of them (the `count` threads of named barrier
// 1; barrier.red, not bar.red: a warp may arrive diverged), as a warp-uniform value (see cvl_wg_all)
__device__ __forceinline__ bool cvl_consumers_any(bool c, unsigned count) {
    unsigned r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbarrier.red.or.pred q, 1, %2, p;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(r) : "r"((unsigned)c), "r"(count) : "memory");
    return __shfl_sync(0xffffffffu, r, 0) != 0;
}

extern "C" __global__ void __launch_bounds__(256, 1) cvl_flash(
    const __half* __restrict__ b0,  // k: f16[B, N, D] input
    const __half* __restrict__ b1,  // q: f16[B, M, D] input
    const int* __restrict__ b2,  // kpos: i32[1, N] input
    const int* __restrict__ b3,  // qpos: i32[M, 1] input
    const __half* __restrict__ b4,  // v: f16[B, N, D] input
    __half* __restrict__ b5,  // o: f16[B, M, D] output
    float u0,  // %3: f16[] scalar
    float u1,  // %7: f16[] scalar
    const __grid_constant__ cvl_tensor_map tma_q,  // TMA descriptor of q: 64 x 64, box 64 x 64
    const __grid_constant__ cvl_tensor_map tma_k,  // TMA descriptor of k: 128 x 64, box 64 x 64
    const __grid_constant__ cvl_tensor_map tma_v  // TMA descriptor of v: 128 x 64, box 64 x 64
) {
    extern __shared__ __align__(1024) unsigned char cvl_smem[];
    __shared__ __align__(8) unsigned long long cvl_bars[14];
    __shared__ unsigned char cvl_chunks[4];  // "skip": "list": some key of these 32 passes the mask against the block's rows
    __shared__ unsigned short cvl_tiles[2];  // the key tiles to compute, in order (see listed_tiles)
    __shared__ int cvl_count;  // how many
    __shared__ volatile int cvl_redo;  // the consumers' verdict: some skip inexact, every tile again
    const unsigned sq = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;  // the block's Q rows
    const unsigned sk = sq + 8192u;  // 3 slots of K
    const unsigned sv = sk + 24576u;  // 3 slots of V
    const unsigned bars = cvl_smem_addr(cvl_bars);  // Q; K full [3]; V full; K empty; V empty; the verdict
    const int mt = 0 - blockIdx.x / 4;
    const int bz = blockIdx.x % 4;
    const int c0 = (bz) % 4;
    (void)bz;
    const int m0 = mt * 64;
    {  // "skip": "list": which keys some row of the block sees, and every row
        int cvl_rows0 = (-2147483647 - 1);  // term 0's row side, its max over the block's rows
        int cvl_all0 = 2147483647;  // and its min
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int m = m0 + i * 32 + (int)(threadIdx.x % 32);
            (void)m;
            {
                const int r0_ = (int)(b3[m]);
                cvl_rows0 = max(cvl_rows0, r0_);
                cvl_all0 = min(cvl_all0, r0_);
            }
        }
        #pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            cvl_rows0 = max(cvl_rows0, __shfl_xor_sync(0xffffffffu, cvl_rows0, o));
            cvl_all0 = min(cvl_all0, __shfl_xor_sync(0xffffffffu, cvl_all0, o));
        }
        #pragma unroll 4
        for (int c = threadIdx.x / 32; c < 4; c += 8) {
            const int n = c * 32 + (int)(threadIdx.x % 32);
            (void)n;
            bool pass = false;
            bool every = true;  // (keys past N pass everywhere)
            {
                const int k0_ = (int)(b2[n]);
                pass = k0_ <= cvl_rows0;
                every = k0_ <= cvl_all0;
            }
            const unsigned char flag = (unsigned char)(__any_sync(0xffffffffu, pass) | (__all_sync(0xffffffffu, every) << 1));
            if (threadIdx.x % 32 == 0) cvl_chunks[c] = flag;
        }
    }
    if (threadIdx.x == 0) {
        cvl_tma_prefetch(tma_q);
        cvl_tma_prefetch(tma_k);
        cvl_tma_prefetch(tma_v);
        for (int i = 0; i < 7; ++i) cvl_mbar_init(bars + 8 * i, 1u);
        for (int i = 7; i < 13; ++i) cvl_mbar_init(bars + 8 * i, 1u);
        cvl_mbar_init(bars + 8 * 13, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // "skip": "list": the key tiles to compute
        int count = 0;
        bool before = false;  // whether the tile before this round's first is listed
        #pragma unroll 1
        for (int t0 = 0; t0 < 2; t0 += 32) {
            const int t = t0 + (int)threadIdx.x;
            bool keep = false, every = true;
            #pragma unroll
            for (int j = 0; j < 2; ++j) {
                const unsigned flag = t * 2 + j < 4 ? cvl_chunks[t * 2 + j] : 2u;
                keep = keep || (flag & 1u) != 0;
                every = every && (flag & 2u) != 0;
            }
            const unsigned kept = __ballot_sync(0xffffffffu, keep);
            const int at = count + __popc(kept & ((1u << threadIdx.x) - 1u));  // its place in the list
            const bool gap = at > 0 && !(threadIdx.x > 0 ? (kept >> (threadIdx.x - 1)) & 1u : before);
            before = kept >> 31;  // (whether tile t0 + 31 is listed)
            if (keep) cvl_tiles[at] = (unsigned short)(t | (gap ? 16384 : 0) | (every ? 32768 : 0));
            count += __popc(kept);
        }
        if (threadIdx.x == 0) cvl_count = count;
    }
    __syncthreads();
    const int cvl_cnt = __shfl_sync(0xffffffffu, cvl_count, 0);  // the listed tiles: warp-uniform to ptxas
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x == 0) {
            cvl_mbar_expect_tx(bars, 8192u);
            cvl_tma_3d(sq + 0u, tma_q, 0, m0, (int)c0, bars);
            #pragma unroll 1
            for (int t = 0; t < cvl_cnt; ++t) {
                const int tk = cvl_tiles[t] & 16383;  // the key tile
                const unsigned stage = t % 3, use = t / 3;
                const int n0 = tk * 64;
                if (t >= 3) cvl_mbar_wait(bars + 8 * (1 + 6 + stage), (use - 1) & 1);  // K's slot free
                cvl_mbar_expect_tx(bars + 8 * (1 + stage), 8192u);
                cvl_tma_3d(sk + stage * 8192u + 0u, tma_k, 0, n0, (int)c0, bars + 8 * (1 + stage));
                if (t >= 3) cvl_mbar_wait(bars + 8 * (1 + 9 + stage), (use - 1) & 1);  // V's slot free
                cvl_mbar_expect_tx(bars + 8 * (1 + 3 + stage), 8192u);
                cvl_tma_3d(sv + stage * 8192u + 0u, tma_v, 0, n0, (int)c0, bars + 8 * (1 + 3 + stage));
            }
            cvl_mbar_wait(bars + 8 * 13, 0);  // the consumers' verdict on the skipped tiles
            if (cvl_redo) {
                #pragma unroll 1
                for (int t = cvl_cnt; t < cvl_cnt + 2; ++t) {
                    const int tk = t - cvl_cnt;  // the key tile
                    const unsigned stage = t % 3, use = t / 3;
                    const int n0 = tk * 64;
                    if (t >= 3) cvl_mbar_wait(bars + 8 * (1 + 6 + stage), (use - 1) & 1);  // K's slot free
                    cvl_mbar_expect_tx(bars + 8 * (1 + stage), 8192u);
                    cvl_tma_3d(sk + stage * 8192u + 0u, tma_k, 0, n0, (int)c0, bars + 8 * (1 + stage));
                    if (t >= 3) cvl_mbar_wait(bars + 8 * (1 + 9 + stage), (use - 1) & 1);  // V's slot free
                    cvl_mbar_expect_tx(bars + 8 * (1 + 3 + stage), 8192u);
                    cvl_tma_3d(sv + stage * 8192u + 0u, tma_v, 0, n0, (int)c0, bars + 8 * (1 + 3 + stage));
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
        const int lane = threadIdx.x % 32;
        const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128) - 1, 0);  // consumer warpgroup (uniform)
        const int wm = wg * 64 + (threadIdx.x / 32) % 4 * 16;  // this warp's rows of the block
        const int d0 = 0;
        const unsigned long long desc_q = cvl_wgmma_desc(sq + wg * 8192u, 16u, 1024u);
        const unsigned long long desc_k = cvl_wgmma_desc(sk, 16u, 1024u);
        const unsigned long long desc_v = cvl_wgmma_desc(sv, 8192u, 1024u);
        float o[1][8][4];
        #pragma unroll
        for (int nd = 0; nd < 8; ++nd)
        #pragma unroll
            for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.0f;
        float row_max[2], row_base[2], row_sum[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            row_max[r] = (-__int_as_float(0x7f800000));
            row_base[r] = 0.0f;
            row_sum[r] = 0.0f;
        }
        const float fold_c = u0 * 1.4426950408889634f;  // exp(acc * u) = 2^(acc * fold_c)
        const float fold_abs = fabsf(u0);
        const bool fold_flip = u0 < 0.0f;
        float s[1][8][4];
        unsigned pf[4][4];  // P's A fragments
        cvl_mbar_wait(bars, 0);  // Q
        const int cvl_own = cvl_cnt;  // the listed tiles
        bool cvl_ok = true;  // the skipped tiles' numerators all 0 in this thread's rows
        if (cvl_own > 0) {
            {
                const int tk = cvl_tiles[0] & 16383;  // the first listed key tile
                const bool cvl_bare = cvl_tiles[0] > 32767u;  // every element unmasked
                cvl_mbar_wait(bars + 8 * (1 + (0) % 3), ((0) / 3) & 1);
                cvl_wgmma_fence();
                cvl_wgmma_qk<0>(s[0], desc_q + (0 >> 4), desc_k + (((0) * 8192 + 0) >> 4));
                cvl_wgmma_qk<1>(s[0], desc_q + (32 >> 4), desc_k + (((0) * 8192 + 32) >> 4));
                cvl_wgmma_qk<1>(s[0], desc_q + (64 >> 4), desc_k + (((0) * 8192 + 64) >> 4));
                cvl_wgmma_qk<1>(s[0], desc_q + (96 >> 4), desc_k + (((0) * 8192 + 96) >> 4));
                cvl_wgmma_commit();
                cvl_wgmma_wait<0>();
                cvl_pin(s[0]);
                if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (7 + (0) % 3));
                float alpha[2];
                const int n0 = tk * 64;
                (void)n0;
                const bool cvl_fold = cvl_bare && !fold_flip;  // the raw accumulators, scaled by the factors
                if (!cvl_fold) {
                    if (cvl_bare) {
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                        for (int h = 0; h < 2; ++h)
                        #pragma unroll
                        for (int q = 0; q < 2; ++q) {
                            const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
                            const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                            (void)m; (void)n;
                            float& ACC = s[mi][ni][h * 2 + q];
                            const float t1 = ACC;
                            const float t2 = (t1 * u0);
                            ACC = t2;
                        }
                    } else {
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                        for (int h = 0; h < 2; ++h)
                        #pragma unroll
                        for (int q = 0; q < 2; ++q) {
                            const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
                            const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                            (void)m; (void)n;
                            float& ACC = s[mi][ni][h * 2 + q];
                            const bool t4 = (b2[n] <= b3[m]);
                            const float t5 = ACC;
                            const float t6 = (t5 * u0);
                            const float t7 = (t4 ? t6 : u1);
                            ACC = t7;
                        }
                    }
                }
                const float cvl_fs = cvl_fold ? fold_abs : 1.0f;  // the maximum's scale
                const float cvl_fc = cvl_fold ? fold_c : 1.4426950408889634f;  // the exponent's factor
                float top[2];
                float part[2][4];
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                #pragma unroll
                    for (int c = 0; c < 4; ++c) part[r][c] = (-__int_as_float(0x7f800000));
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                #pragma unroll
                    for (int e = 0; e < 4; ++e)
                        part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    top[r] = part[r][0];
                #pragma unroll
                    for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r) top[r] *= cvl_fs;
                float base[2];
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
                    top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
                    top[r] = fmaxf(top[r], row_max[r]);
                    const float bl = __fmul_rn(top[r], 1.4426950408889634f);
                    base[r] = top[r] == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                    alpha[r] = row_max[r] == top[r] ? 1.0f
                             : row_max[r] == (-__int_as_float(0x7f800000)) ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet
                    row_max[r] = top[r];
                    row_base[r] = base[r];
                    row_sum[r] *= alpha[r];
                }
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = mi * 2 + e / 2;
                        s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], cvl_fc, -base[r]));
                        row_sum[r] += s[mi][ni][e];
                    }
                (void)alpha;  // o is still 0
                if (tk != 0) {  // tiles skipped before it: this tile's maxima must zero their numerators
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int m = m0 + wm + lane / 4 + r * 8;
                        (void)m;
                        cvl_ok = cvl_ok && ((row_max[r] > (float)(u1) && fmaf((float)(u1), 1.4426950408889634f, -row_base[r]) < -150.0f));
                    }
                }
                #pragma unroll
                for (int j = 0; j < 4; ++j) {
                    pf[j][0] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][0], s[0][2 * j][1]));
                    pf[j][1] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][2], s[0][2 * j][3]));
                    pf[j][2] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));
                    pf[j][3] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));
                }
            }
            #pragma unroll 1
            for (int t = 1; t < cvl_own; ) {
                const bool cvl_round = (t - 1) % 3 == 0 && t + 3 <= cvl_own && !fold_flip && (((cvl_tiles[t] ^ 32768u) | (cvl_tiles[t + 1] ^ 32768u) | (cvl_tiles[t + 2] ^ 32768u)) & 49152u) == 0u;  // S bare tiles, none after a gap, from slot 1
                if (cvl_round) {
                    const unsigned cvl_ph = (t / 3) & 1;  // the round's phase of the slots' barriers
                    {
                        cvl_mbar_wait(bars + 8 * (1 + 1), cvl_ph);
                        cvl_mbar_wait(bars + 8 * (4 + 0), cvl_ph);
                        cvl_wgmma_fence();
                        cvl_wgmma_qk<0>(s[0], desc_q + (0 >> 4), desc_k + ((((1)) * 8192 + 0) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (32 >> 4), desc_k + ((((1)) * 8192 + 32) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (64 >> 4), desc_k + ((((1)) * 8192 + 64) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (96 >> 4), desc_k + ((((1)) * 8192 + 96) >> 4));
                        cvl_wgmma_commit();
                        cvl_wgmma_pv(o[0], pf[0], desc_v + ((((0)) * 8192 + 0) >> 4));
                        cvl_wgmma_pv(o[0], pf[1], desc_v + ((((0)) * 8192 + 2048) >> 4));
                        cvl_wgmma_pv(o[0], pf[2], desc_v + ((((0)) * 8192 + 4096) >> 4));
                        cvl_wgmma_pv(o[0], pf[3], desc_v + ((((0)) * 8192 + 6144) >> 4));
                        cvl_wgmma_commit();
                        cvl_wgmma_wait<1>();  // S of tile t (O += P V of the tile before may still run)
                        cvl_pin(s[0]);
                        if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (7 + 1));
                        float alpha[2];
                        float top[2];
                        float part[2][4];
                        #pragma unroll
                        for (int r = 0; r < 2; ++r)
                        #pragma unroll
                            for (int c = 0; c < 4; ++c) part[r][c] = (-__int_as_float(0x7f800000));
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e)
                                part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            top[r] = part[r][0];
                        #pragma unroll
                            for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);
                        }
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) top[r] *= fold_abs;
                        float base[2];
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
                            top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
                            top[r] = fmaxf(top[r], row_max[r]);
                            const float bl = __fmul_rn(top[r], 1.4426950408889634f);
                            base[r] = top[r] == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                            alpha[r] = row_max[r] == top[r] ? 1.0f
                                     : row_max[r] == (-__int_as_float(0x7f800000)) ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet
                            row_max[r] = top[r];
                            row_base[r] = base[r];
                            row_sum[r] *= alpha[r];
                        }
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                const int r = mi * 2 + e / 2;
                                s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], fold_c, -base[r]));
                                row_sum[r] += s[mi][ni][e];
                            }
                        cvl_pin(s[0]);
                        cvl_wgmma_wait<0>();
                        cvl_pin(o[0]);
                        cvl_pin(pf);
                        if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (10 + 0));
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int nd = 0; nd < 8; ++nd)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e) o[mi][nd][e] *= alpha[mi * 2 + e / 2];
                        #pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            pf[j][0] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][0], s[0][2 * j][1]));
                            pf[j][1] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][2], s[0][2 * j][3]));
                            pf[j][2] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));
                            pf[j][3] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));
                        }
                    }
                    {
                        cvl_mbar_wait(bars + 8 * (1 + 2), cvl_ph);
                        cvl_mbar_wait(bars + 8 * (4 + 1), cvl_ph);
                        cvl_wgmma_fence();
                        cvl_wgmma_qk<0>(s[0], desc_q + (0 >> 4), desc_k + ((((2)) * 8192 + 0) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (32 >> 4), desc_k + ((((2)) * 8192 + 32) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (64 >> 4), desc_k + ((((2)) * 8192 + 64) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (96 >> 4), desc_k + ((((2)) * 8192 + 96) >> 4));
                        cvl_wgmma_commit();
                        cvl_wgmma_pv(o[0], pf[0], desc_v + ((((1)) * 8192 + 0) >> 4));
                        cvl_wgmma_pv(o[0], pf[1], desc_v + ((((1)) * 8192 + 2048) >> 4));
                        cvl_wgmma_pv(o[0], pf[2], desc_v + ((((1)) * 8192 + 4096) >> 4));
                        cvl_wgmma_pv(o[0], pf[3], desc_v + ((((1)) * 8192 + 6144) >> 4));
                        cvl_wgmma_commit();
                        cvl_wgmma_wait<1>();  // S of tile t + 1 (O += P V of the tile before may still run)
                        cvl_pin(s[0]);
                        if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (7 + 2));
                        float alpha[2];
                        float top[2];
                        float part[2][4];
                        #pragma unroll
                        for (int r = 0; r < 2; ++r)
                        #pragma unroll
                            for (int c = 0; c < 4; ++c) part[r][c] = (-__int_as_float(0x7f800000));
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e)
                                part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            top[r] = part[r][0];
                        #pragma unroll
                            for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);
                        }
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) top[r] *= fold_abs;
                        float base[2];
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
                            top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
                            top[r] = fmaxf(top[r], row_max[r]);
                            const float bl = __fmul_rn(top[r], 1.4426950408889634f);
                            base[r] = top[r] == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                            alpha[r] = row_max[r] == top[r] ? 1.0f
                                     : row_max[r] == (-__int_as_float(0x7f800000)) ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet
                            row_max[r] = top[r];
                            row_base[r] = base[r];
                            row_sum[r] *= alpha[r];
                        }
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                const int r = mi * 2 + e / 2;
                                s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], fold_c, -base[r]));
                                row_sum[r] += s[mi][ni][e];
                            }
                        cvl_pin(s[0]);
                        cvl_wgmma_wait<0>();
                        cvl_pin(o[0]);
                        cvl_pin(pf);
                        if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (10 + 1));
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int nd = 0; nd < 8; ++nd)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e) o[mi][nd][e] *= alpha[mi * 2 + e / 2];
                        #pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            pf[j][0] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][0], s[0][2 * j][1]));
                            pf[j][1] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][2], s[0][2 * j][3]));
                            pf[j][2] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));
                            pf[j][3] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));
                        }
                    }
                    {
                        cvl_mbar_wait(bars + 8 * (1 + 0), cvl_ph ^ 1);
                        cvl_mbar_wait(bars + 8 * (4 + 2), cvl_ph);
                        cvl_wgmma_fence();
                        cvl_wgmma_qk<0>(s[0], desc_q + (0 >> 4), desc_k + ((((0)) * 8192 + 0) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (32 >> 4), desc_k + ((((0)) * 8192 + 32) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (64 >> 4), desc_k + ((((0)) * 8192 + 64) >> 4));
                        cvl_wgmma_qk<1>(s[0], desc_q + (96 >> 4), desc_k + ((((0)) * 8192 + 96) >> 4));
                        cvl_wgmma_commit();
                        cvl_wgmma_pv(o[0], pf[0], desc_v + ((((2)) * 8192 + 0) >> 4));
                        cvl_wgmma_pv(o[0], pf[1], desc_v + ((((2)) * 8192 + 2048) >> 4));
                        cvl_wgmma_pv(o[0], pf[2], desc_v + ((((2)) * 8192 + 4096) >> 4));
                        cvl_wgmma_pv(o[0], pf[3], desc_v + ((((2)) * 8192 + 6144) >> 4));
                        cvl_wgmma_commit();
                        cvl_wgmma_wait<1>();  // S of tile t + 2 (O += P V of the tile before may still run)
                        cvl_pin(s[0]);
                        if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (7 + 0));
                        float alpha[2];
                        float top[2];
                        float part[2][4];
                        #pragma unroll
                        for (int r = 0; r < 2; ++r)
                        #pragma unroll
                            for (int c = 0; c < 4; ++c) part[r][c] = (-__int_as_float(0x7f800000));
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e)
                                part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            top[r] = part[r][0];
                        #pragma unroll
                            for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);
                        }
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) top[r] *= fold_abs;
                        float base[2];
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
                            top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
                            top[r] = fmaxf(top[r], row_max[r]);
                            const float bl = __fmul_rn(top[r], 1.4426950408889634f);
                            base[r] = top[r] == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                            alpha[r] = row_max[r] == top[r] ? 1.0f
                                     : row_max[r] == (-__int_as_float(0x7f800000)) ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet
                            row_max[r] = top[r];
                            row_base[r] = base[r];
                            row_sum[r] *= alpha[r];
                        }
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int ni = 0; ni < 8; ++ni)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                const int r = mi * 2 + e / 2;
                                s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], fold_c, -base[r]));
                                row_sum[r] += s[mi][ni][e];
                            }
                        cvl_pin(s[0]);
                        cvl_wgmma_wait<0>();
                        cvl_pin(o[0]);
                        cvl_pin(pf);
                        if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (10 + 2));
                        #pragma unroll
                        for (int mi = 0; mi < 1; ++mi)
                        #pragma unroll
                        for (int nd = 0; nd < 8; ++nd)
                        #pragma unroll
                            for (int e = 0; e < 4; ++e) o[mi][nd][e] *= alpha[mi * 2 + e / 2];
                        #pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            pf[j][0] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][0], s[0][2 * j][1]));
                            pf[j][1] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][2], s[0][2 * j][3]));
                            pf[j][2] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));
                            pf[j][3] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));
                        }
                    }
                    t += 3;
                } else {
                    const int tk = cvl_tiles[t] & 16383;  // the key tile
                    const bool cvl_bare = cvl_tiles[t] > 32767u;  // every element unmasked
                    if ((cvl_tiles[t] & 16384u) != 0u) {  // tiles skipped since the last (bit 14)
                        #pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            const int m = m0 + wm + lane / 4 + r * 8;
                            (void)m;
                            cvl_ok = cvl_ok && ((row_max[r] > (float)(u1) && fmaf((float)(u1), 1.4426950408889634f, -row_base[r]) < -150.0f));
                        }
                    }
                    cvl_mbar_wait(bars + 8 * (1 + (t) % 3), ((t) / 3) & 1);
                    cvl_mbar_wait(bars + 8 * (4 + (t - 1) % 3), ((t - 1) / 3) & 1);
                    cvl_wgmma_fence();
                    cvl_wgmma_qk<0>(s[0], desc_q + (0 >> 4), desc_k + (((((t) % 3)) * 8192 + 0) >> 4));
                    cvl_wgmma_qk<1>(s[0], desc_q + (32 >> 4), desc_k + (((((t) % 3)) * 8192 + 32) >> 4));
                    cvl_wgmma_qk<1>(s[0], desc_q + (64 >> 4), desc_k + (((((t) % 3)) * 8192 + 64) >> 4));
                    cvl_wgmma_qk<1>(s[0], desc_q + (96 >> 4), desc_k + (((((t) % 3)) * 8192 + 96) >> 4));
                    cvl_wgmma_commit();
                    cvl_wgmma_pv(o[0], pf[0], desc_v + (((((t - 1) % 3)) * 8192 + 0) >> 4));
                    cvl_wgmma_pv(o[0], pf[1], desc_v + (((((t - 1) % 3)) * 8192 + 2048) >> 4));
                    cvl_wgmma_pv(o[0], pf[2], desc_v + (((((t - 1) % 3)) * 8192 + 4096) >> 4));
                    cvl_wgmma_pv(o[0], pf[3], desc_v + (((((t - 1) % 3)) * 8192 + 6144) >> 4));
                    cvl_wgmma_commit();
                    cvl_wgmma_wait<1>();  // S of tile t (O += P V of the tile before may still run)
                    cvl_pin(s[0]);
                    if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (7 + (t) % 3));
                    float alpha[2];
                    const int n0 = tk * 64;
                    (void)n0;
                    const bool cvl_fold = cvl_bare && !fold_flip;  // the raw accumulators, scaled by the factors
                    if (!cvl_fold) {
                        if (cvl_bare) {
                            #pragma unroll
                            for (int mi = 0; mi < 1; ++mi)
                            #pragma unroll
                            for (int ni = 0; ni < 8; ++ni)
                            #pragma unroll
                            for (int h = 0; h < 2; ++h)
                            #pragma unroll
                            for (int q = 0; q < 2; ++q) {
                                const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
                                const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                                (void)m; (void)n;
                                float& ACC = s[mi][ni][h * 2 + q];
                                const float t11 = ACC;
                                const float t12 = (t11 * u0);
                                ACC = t12;
                            }
                        } else {
                            #pragma unroll
                            for (int mi = 0; mi < 1; ++mi)
                            #pragma unroll
                            for (int ni = 0; ni < 8; ++ni)
                            #pragma unroll
                            for (int h = 0; h < 2; ++h)
                            #pragma unroll
                            for (int q = 0; q < 2; ++q) {
                                const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
                                const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                                (void)m; (void)n;
                                float& ACC = s[mi][ni][h * 2 + q];
                                const bool t14 = (b2[n] <= b3[m]);
                                const float t15 = ACC;
                                const float t16 = (t15 * u0);
                                const float t17 = (t14 ? t16 : u1);
                                ACC = t17;
                            }
                        }
                    }
                    const float cvl_fs = cvl_fold ? fold_abs : 1.0f;  // the maximum's scale
                    const float cvl_fc = cvl_fold ? fold_c : 1.4426950408889634f;  // the exponent's factor
                    float top[2];
                    float part[2][4];
                    #pragma unroll
                    for (int r = 0; r < 2; ++r)
                    #pragma unroll
                        for (int c = 0; c < 4; ++c) part[r][c] = (-__int_as_float(0x7f800000));
                    #pragma unroll
                    for (int mi = 0; mi < 1; ++mi)
                    #pragma unroll
                    for (int ni = 0; ni < 8; ++ni)
                    #pragma unroll
                        for (int e = 0; e < 4; ++e)
                            part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        top[r] = part[r][0];
                    #pragma unroll
                        for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);
                    }
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) top[r] *= cvl_fs;
                    float base[2];
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
                        top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
                        top[r] = fmaxf(top[r], row_max[r]);
                        const float bl = __fmul_rn(top[r], 1.4426950408889634f);
                        base[r] = top[r] == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                        alpha[r] = row_max[r] == top[r] ? 1.0f
                                 : row_max[r] == (-__int_as_float(0x7f800000)) ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet
                        row_max[r] = top[r];
                        row_base[r] = base[r];
                        row_sum[r] *= alpha[r];
                    }
                    #pragma unroll
                    for (int mi = 0; mi < 1; ++mi)
                    #pragma unroll
                    for (int ni = 0; ni < 8; ++ni)
                    #pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int r = mi * 2 + e / 2;
                            s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], cvl_fc, -base[r]));
                            row_sum[r] += s[mi][ni][e];
                        }
                    cvl_wgmma_wait<0>();
                    cvl_pin(o[0]);
                    cvl_pin(pf);
                    if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (10 + (t - 1) % 3));
                    #pragma unroll
                    for (int mi = 0; mi < 1; ++mi)
                    #pragma unroll
                    for (int nd = 0; nd < 8; ++nd)
                    #pragma unroll
                        for (int e = 0; e < 4; ++e) o[mi][nd][e] *= alpha[mi * 2 + e / 2];
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        pf[j][0] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][0], s[0][2 * j][1]));
                        pf[j][1] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][2], s[0][2 * j][3]));
                        pf[j][2] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));
                        pf[j][3] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));
                    }
                    ++t;
                }
            }
            cvl_mbar_wait(bars + 8 * (4 + (cvl_own - 1) % 3), ((cvl_own - 1) / 3) & 1);
            cvl_wgmma_fence();
            cvl_wgmma_pv(o[0], pf[0], desc_v + (((((cvl_own - 1) % 3)) * 8192 + 0) >> 4));
            cvl_wgmma_pv(o[0], pf[1], desc_v + (((((cvl_own - 1) % 3)) * 8192 + 2048) >> 4));
            cvl_wgmma_pv(o[0], pf[2], desc_v + (((((cvl_own - 1) % 3)) * 8192 + 4096) >> 4));
            cvl_wgmma_pv(o[0], pf[3], desc_v + (((((cvl_own - 1) % 3)) * 8192 + 6144) >> 4));
            cvl_wgmma_commit();
            cvl_wgmma_wait<0>();
            cvl_pin(o[0]);
            if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (10 + (cvl_own - 1) % 3));
        }
        if (cvl_own == 0 || (cvl_tiles[cvl_own - 1] & 16383) != 1) {  // tiles skipped after the last
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int m = m0 + wm + lane / 4 + r * 8;
                (void)m;
                cvl_ok = cvl_ok && ((row_max[r] > (float)(u1) && fmaf((float)(u1), 1.4426950408889634f, -row_base[r]) < -150.0f));
            }
        }
        const bool cvl_again = cvl_consumers_any(!cvl_ok, 128u);  // some skip inexact
        if (wg == 0 && threadIdx.x % 128 == 0) {
            cvl_redo = cvl_again;
            cvl_mbar_arrive(bars + 8 * 13);  // the producer's: load every tile again, or stop
        }
        if (cvl_again) {  // every key tile, as without the skip
            #pragma unroll
            for (int nd = 0; nd < 8; ++nd)
            #pragma unroll
                for (int e = 0; e < 4; ++e) o[0][nd][e] = 0.0f;
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                row_max[r] = (-__int_as_float(0x7f800000));
                row_base[r] = 0.0f;
                row_sum[r] = 0.0f;
            }
            #pragma unroll 1
            for (int t = 0; t < 2; ++t) {
                cvl_mbar_wait(bars + 8 * (1 + (cvl_cnt + t) % 3), ((cvl_cnt + t) / 3) & 1);
                cvl_wgmma_fence();
                cvl_wgmma_qk<0>(s[0], desc_q + (0 >> 4), desc_k + (((((cvl_cnt + t) % 3)) * 8192 + 0) >> 4));
                cvl_wgmma_qk<1>(s[0], desc_q + (32 >> 4), desc_k + (((((cvl_cnt + t) % 3)) * 8192 + 32) >> 4));
                cvl_wgmma_qk<1>(s[0], desc_q + (64 >> 4), desc_k + (((((cvl_cnt + t) % 3)) * 8192 + 64) >> 4));
                cvl_wgmma_qk<1>(s[0], desc_q + (96 >> 4), desc_k + (((((cvl_cnt + t) % 3)) * 8192 + 96) >> 4));
                cvl_wgmma_commit();
                cvl_wgmma_wait<0>();
                cvl_pin(s[0]);
                if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (7 + (cvl_cnt + t) % 3));
                float alpha[2];
                const int n0 = (t) * 64;
                (void)n0;
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                #pragma unroll
                for (int h = 0; h < 2; ++h)
                #pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
                    const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                    (void)m; (void)n;
                    float& ACC = s[mi][ni][h * 2 + q];
                    const bool t21 = (b2[n] <= b3[m]);
                    const float t22 = ACC;
                    const float t23 = (t22 * u0);
                    const float t24 = (t21 ? t23 : u1);
                    ACC = t24;
                }
                float top[2];
                float part[2][4];
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                #pragma unroll
                    for (int c = 0; c < 4; ++c) part[r][c] = (-__int_as_float(0x7f800000));
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                #pragma unroll
                    for (int e = 0; e < 4; ++e)
                        part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    top[r] = part[r][0];
                #pragma unroll
                    for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);
                }
                float base[2];
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
                    top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
                    top[r] = fmaxf(top[r], row_max[r]);
                    const float bl = __fmul_rn(top[r], 1.4426950408889634f);
                    base[r] = top[r] == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                    alpha[r] = row_max[r] == top[r] ? 1.0f
                             : row_max[r] == (-__int_as_float(0x7f800000)) ? 0.0f : cvl_ex2(row_base[r] - base[r]);  // nothing to scale yet
                    row_max[r] = top[r];
                    row_base[r] = base[r];
                    row_sum[r] *= alpha[r];
                }
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 8; ++ni)
                #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = mi * 2 + e / 2;
                        s[mi][ni][e] = cvl_ex2(fmaf(s[mi][ni][e], 1.4426950408889634f, -base[r]));
                        row_sum[r] += s[mi][ni][e];
                    }
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
                #pragma unroll
                for (int nd = 0; nd < 8; ++nd)
                #pragma unroll
                    for (int e = 0; e < 4; ++e) o[mi][nd][e] *= alpha[mi * 2 + e / 2];
                #pragma unroll
                for (int j = 0; j < 4; ++j) {
                    pf[j][0] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][0], s[0][2 * j][1]));
                    pf[j][1] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j][2], s[0][2 * j][3]));
                    pf[j][2] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][0], s[0][2 * j + 1][1]));
                    pf[j][3] = cvl_pack_bits(__floats2half2_rn(s[0][2 * j + 1][2], s[0][2 * j + 1][3]));
                }
                cvl_mbar_wait(bars + 8 * (4 + (cvl_cnt + t) % 3), ((cvl_cnt + t) / 3) & 1);
                cvl_wgmma_fence();
                cvl_wgmma_pv(o[0], pf[0], desc_v + (((((cvl_cnt + t) % 3)) * 8192 + 0) >> 4));
                cvl_wgmma_pv(o[0], pf[1], desc_v + (((((cvl_cnt + t) % 3)) * 8192 + 2048) >> 4));
                cvl_wgmma_pv(o[0], pf[2], desc_v + (((((cvl_cnt + t) % 3)) * 8192 + 4096) >> 4));
                cvl_wgmma_pv(o[0], pf[3], desc_v + (((((cvl_cnt + t) % 3)) * 8192 + 6144) >> 4));
                cvl_wgmma_commit();
                cvl_wgmma_wait<0>();
                cvl_pin(o[0]);
                cvl_pin(pf);
                if (threadIdx.x % 128 == 0) cvl_mbar_arrive(bars + 8 * (10 + (cvl_cnt + t) % 3));
            }
        }
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
            row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
            row_sum[r] = 1.0f / row_sum[r];  // 1 / 0 = inf: a row all -inf gives 0 * inf = NaN
        }
        #pragma unroll
        for (int mi = 0; mi < 1; ++mi)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
            const float inv = row_sum[mi * 2 + h];
            #pragma unroll
            for (int nd = 0; nd < 8; ++nd) {
                const int d = d0 + nd * 8 + lane % 4 * 2;
                *reinterpret_cast<__half2*>(b5 + (c0 * 4096 + m * 64) + d) = __floats2half2_rn(o[mi][nd][h * 2] * inv, o[mi][nd][h * 2 + 1] * inv);
            }
        }
    }
}
