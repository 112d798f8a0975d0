// cuvil-dsl kernel masked_softmax (matmul_softmax) of pipeline masked_attention, domain [4, 64, 128]
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

// D (64 x 64, f32) += A (64 x 16, descriptor) * B (16 x 64, descriptor); trans-a 0, trans-b 0
__device__ __forceinline__ void cvl_wgmma(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "n"(1));
}
// Pins the accumulators between wgmma's asynchronous writes and ordinary reads or writes.
__device__ __forceinline__ void cvl_wgmma_pin(float (&d)[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
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
        if (!done && clock64() - t0 > (1ll << 31)) __trap();
    } while (!done);
}

// D (64 x 64, f32) = A (64 x 16, descriptor) * B (16 x 64, descriptor); trans-a 0, trans-b 0
__device__ __forceinline__ void cvl_wgmma_set(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "n"(0));
}

// 2^x by the MUFU (relative error below 2^-21; -inf -> 0, NaN -> NaN); subnormal results flush to 0.
__device__ __forceinline__ float cvl_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

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

// stmatrix: four 8x8 b16 matrices to shared memory, register i of every lane holding matrix i's
// elements (row lane / 4, columns lane % 4 * 2, + 1), the layout of an mma C fragment; lane l gives
// the address of row l % 8 of matrix l / 8 (sm_90)
__device__ __forceinline__ void cvl_stsm_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

template <typename T> __device__ __forceinline__ unsigned cvl_pack_bits(T v) {
    return *reinterpret_cast<unsigned*>(&v);  // a __half2 / __nv_bfloat162 as its 32 bits
}

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

extern "C" __global__ void __launch_bounds__(128, 3) cvl_masked_softmax(
    const __half* __restrict__ b0,  // k: f16[B, N, D] input
    const __half* __restrict__ b1,  // q: f16[B, M, D] input
    const int* __restrict__ b2,  // kpos: i32[1, N] input
    const int* __restrict__ b3,  // qpos: i32[M, 1] input
    __half* __restrict__ b4,  // p: f16[B, M, N] output
    float u0,  // %3: f16[] scalar
    float u1,  // %7: f16[] scalar
    const __grid_constant__ cvl_tensor_map tma_a,  // TMA descriptor of q: 256 x 64, box 64 x 64
    const __grid_constant__ cvl_tensor_map tma_b  // TMA descriptor of k: 512 x 64, box 64 x 64
) {
    extern __shared__ __align__(1024) unsigned char cvl_smem[];
    const unsigned smem0 = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;
    const unsigned sa = smem0;  // the A band: 64 rows x 64 of K
    const unsigned sb = smem0 + 8192u;  // 2 B tiles of 64 rows
    __half* const so = reinterpret_cast<__half*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem)) + 24576) + (threadIdx.x / 32) * 1152;  // this warp's 16 staging rows
    const int lane = threadIdx.x % 32;
    const int wg = threadIdx.x / 128;
    const int wl = (threadIdx.x / 32) % 4;
    const int warp_row = wg * 64 + wl * 16;  // the warp's first row in the band
    const int row0 = warp_row + lane / 4;  // the thread's first row
    const unsigned so_st = cvl_smem_addr(so) + ((lane % 8 + lane / 8 % 2 * 8) * 72 + lane / 16 * 8) * 2;  // this lane's stmatrix row
    const unsigned long long desc_a = cvl_wgmma_desc(sa + wg * 8192u, 16u, 1024u);
    const unsigned long long desc_b = cvl_wgmma_desc(sb, 16u, 1024u);
    float acc_even[32], acc_odd[32];  // even and odd column tiles
    __half2 pv[2][16];  // the numerators of each tile, rounded to f16
    float tile_base[2][2];  // the thread's base of each row after each tile
    __shared__ __align__(8) unsigned long long cvl_full[3];  // B tiles, then A
    const unsigned full0 = cvl_smem_addr(cvl_full);
    const int n_cta = blockIdx.x % 1 * 128;  // the cluster rank's columns
    const int clusters = gridDim.x / 1;
    if (threadIdx.x == 0) {
        for (int s = 0; s <= 2; ++s) cvl_mbar_init(full0 + s * 8, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        {
            const int ld_mt = (blockIdx.x / 1) % 1;
            const int ld_bz = (blockIdx.x / 1) / 1;
            (void)ld_bz;
            cvl_mbar_expect_tx(full0 + 16, 8192u);
            cvl_tma_2d(sa, tma_a, 0, ld_bz * 64 + ld_mt * 64, full0 + 16);
            cvl_mbar_expect_tx(full0 + 0, 8192u);
            cvl_tma_2d(sb + 0u, tma_b, 0, ld_bz * 128 + n_cta + 0, full0 + 0);
            cvl_mbar_expect_tx(full0 + 8, 8192u);
            cvl_tma_2d(sb + 8192u, tma_b, 0, ld_bz * 128 + n_cta + 64, full0 + 8);
        }
    }
    __syncthreads();
    #pragma unroll 1
    for (int band = blockIdx.x / 1, round = 0; band < 4; band += clusters, ++round) {
        const int mt = (int)((unsigned)(band) % 1u);
        const int bz = (int)((unsigned)(band) / 1u);
        (void)bz;
        const int c0 = (bz) % 4;
        const int m0 = mt * 64;
        const unsigned parity = round & 1;  // of every barrier's phase this round
        float row_max[2], row_sum[2], row_base[2], row_norm[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            row_max[r] = (-__int_as_float(0x7f800000));
            row_sum[r] = 0.0f;
        }
        cvl_mbar_wait(full0 + 16, parity);  // the band is in
        cvl_mbar_wait(full0 + 0, parity);
        cvl_wgmma_fence();
        {
            const int kk = 0;
            cvl_wgmma_set(acc_even, desc_a, desc_b + ((0 + kk * 32) >> 4));
        }
        #pragma unroll
        for (int kk = 1; kk < 4; ++kk)
            cvl_wgmma(acc_even, desc_a + ((kk * 32) >> 4), desc_b + ((0 + kk * 32) >> 4));
        cvl_wgmma_commit();
        {
            cvl_mbar_wait(full0 + 8, parity);
            cvl_wgmma_fence();
            {
                const int kk = 0;
                cvl_wgmma_set(acc_odd, desc_a, desc_b + ((8192 + kk * 32) >> 4));
            }
            #pragma unroll
            for (int kk = 1; kk < 4; ++kk)
                cvl_wgmma(acc_odd, desc_a + ((kk * 32) >> 4), desc_b + ((8192 + kk * 32) >> 4));
            cvl_wgmma_commit();
            cvl_wgmma_wait<1>();
            cvl_wgmma_pin(acc_even);
            float (&acc)[32] = acc_even;
            const int n0 = n_cta + 0;
            float tile_max[2], base[2];
            tile_max[0] = tile_max[1] = (-__int_as_float(0x7f800000));
            #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
            #pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int m = m0 + wg * 64 + wl * 16 + lane / 4 + h * 8;
                const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                const int slot = h;
                float& ACC = acc[ni * 4 + h * 2 + q];
                float s = (-__int_as_float(0x7f800000));
                const bool t1 = (b2[n] <= b3[m]);
                const float t2 = ACC;
                const float t3 = cvl_f16((t2 * u0));
                const float t4 = (t1 ? t3 : u1);
                s = t4;
                ACC = s;
                tile_max[slot] = fmaxf(tile_max[slot], s);
            }
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float top = fmaxf(row_max[r], tile_max[r]);
                const float bl = __fmul_rn(top, 1.4426950408889634f);
                if (row_max[r] != top) row_sum[r] *= cvl_ex2(__fmul_rn(row_max[r], 1.4426950408889634f) - bl);
                row_max[r] = top;
                base[r] = top == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                tile_base[0][r] = bl;  // -inf while the row is: its numerators are 0
            }
            #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wg * 64 + wl * 16 + lane / 4 + h * 8;
                const int n = n0 + ni * 8 + lane % 4 * 2;
                const int slot = h;
                (void)slot;
                float& ACC0 = acc[ni * 4 + h * 2];
                float& ACC1 = acc[ni * 4 + h * 2 + 1];
                const float p0 = cvl_ex2(fmaf(ACC0, 1.4426950408889634f, -base[slot]));
                const float p1 = cvl_ex2(fmaf(ACC1, 1.4426950408889634f, -base[slot]));
                row_sum[slot] += p0 + p1;
                pv[0][ni * 2 + h] = __floats2half2_rn(p0, p1);
            }
        }
        {
            cvl_wgmma_wait<0>();
            cvl_wgmma_pin(acc_odd);
            __syncthreads();  // every warpgroup is past its last wgmma of this band
            if (threadIdx.x == 0 && band + clusters < 4) {
                {
                    const int ld_mt = (band + clusters) % 1;
                    const int ld_bz = (band + clusters) / 1;
                    (void)ld_bz;
                    cvl_mbar_expect_tx(full0 + 16, 8192u);
                    cvl_tma_2d(sa, tma_a, 0, ld_bz * 64 + ld_mt * 64, full0 + 16);
                    cvl_mbar_expect_tx(full0 + 0, 8192u);
                    cvl_tma_2d(sb + 0u, tma_b, 0, ld_bz * 128 + n_cta + 0, full0 + 0);
                    cvl_mbar_expect_tx(full0 + 8, 8192u);
                    cvl_tma_2d(sb + 8192u, tma_b, 0, ld_bz * 128 + n_cta + 64, full0 + 8);
                }
            }
            float (&acc)[32] = acc_odd;
            const int n0 = n_cta + 64;
            float tile_max[2], base[2];
            tile_max[0] = tile_max[1] = (-__int_as_float(0x7f800000));
            #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
            #pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int m = m0 + wg * 64 + wl * 16 + lane / 4 + h * 8;
                const int n = n0 + ni * 8 + lane % 4 * 2 + q;
                const int slot = h;
                float& ACC = acc[ni * 4 + h * 2 + q];
                float s = (-__int_as_float(0x7f800000));
                const bool t5 = (b2[n] <= b3[m]);
                const float t6 = ACC;
                const float t7 = cvl_f16((t6 * u0));
                const float t8 = (t5 ? t7 : u1);
                s = t8;
                ACC = s;
                tile_max[slot] = fmaxf(tile_max[slot], s);
            }
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float top = fmaxf(row_max[r], tile_max[r]);
                const float bl = __fmul_rn(top, 1.4426950408889634f);
                if (row_max[r] != top) row_sum[r] *= cvl_ex2(__fmul_rn(row_max[r], 1.4426950408889634f) - bl);
                row_max[r] = top;
                base[r] = top == (-__int_as_float(0x7f800000)) ? 0.0f : bl;  // a row all -inf so far adds exp(-inf) = 0
                tile_base[1][r] = bl;  // -inf while the row is: its numerators are 0
            }
            #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wg * 64 + wl * 16 + lane / 4 + h * 8;
                const int n = n0 + ni * 8 + lane % 4 * 2;
                const int slot = h;
                (void)slot;
                float& ACC0 = acc[ni * 4 + h * 2];
                float& ACC1 = acc[ni * 4 + h * 2 + 1];
                const float p0 = cvl_ex2(fmaf(ACC0, 1.4426950408889634f, -base[slot]));
                const float p1 = cvl_ex2(fmaf(ACC1, 1.4426950408889634f, -base[slot]));
                row_sum[slot] += p0 + p1;
                pv[1][ni * 2 + h] = __floats2half2_rn(p0, p1);
            }
        }
        #pragma unroll
        for (int r = 0; r < 2; ++r) {  // the four lanes of a row
            const float top = cvl_warp_max(row_max[r], 4);
            const float bl = __fmul_rn(top, 1.4426950408889634f);
            const float part = row_max[r] == top ? row_sum[r]
                               : row_sum[r] * cvl_ex2(__fmul_rn(row_max[r], 1.4426950408889634f) - bl);
            row_sum[r] = cvl_warp_sum(part, 4);
            row_max[r] = top;
        }
        float fin_base[2], inv_sum[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            fin_base[r] = __fmul_rn(row_max[r], 1.4426950408889634f);
            inv_sum[r] = 1.0f / row_sum[r];
        }
        {
            const int n0 = n_cta + 0;
            float sc[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) sc[r] = cvl_ex2(tile_base[0][r] - fin_base[r]) * inv_sum[r];
            __syncwarp();  // the warp's previous tile is out of its staging rows
            const unsigned sh[2] = {cvl_half2_bits(sc[0]), cvl_half2_bits(sc[1])};
            #pragma unroll
            for (int q = 0; q < 4; ++q) {  // columns 16q to 16q + 15 of rows 0-7, 8-15
                unsigned r[4];  // matrix j: pair j / 2 of the lane's two in those columns, row half j % 2
            #pragma unroll
                for (int j = 0; j < 4; ++j) r[j] = cvl_hmul2_bits(cvl_pack_bits(pv[0][q * 4 + j]), sh[j % 2]);
                cvl_stsm_x4(so_st + q * 32, r[0], r[1], r[2], r[3]);
            }
            __syncwarp();
            #pragma unroll
            for (int i = 0; i < 4; ++i) {  // 16 rows of 8 chunks of 16 bytes
                const int c = i * 32 + lane;
                const int m = m0 + warp_row + c / 8;
                const int n = n0 + c % 8 * 8;
                __stcs(reinterpret_cast<uint4*>(&b4[c0 * 8192 + m * 128 + n]), *reinterpret_cast<const uint4*>(so + c / 8 * 72 + c % 8 * 8));
            }
        }
        {
            const int n0 = n_cta + 64;
            float sc[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) sc[r] = cvl_ex2(tile_base[1][r] - fin_base[r]) * inv_sum[r];
            __syncwarp();  // the warp's previous tile is out of its staging rows
            const unsigned sh[2] = {cvl_half2_bits(sc[0]), cvl_half2_bits(sc[1])};
            #pragma unroll
            for (int q = 0; q < 4; ++q) {  // columns 16q to 16q + 15 of rows 0-7, 8-15
                unsigned r[4];  // matrix j: pair j / 2 of the lane's two in those columns, row half j % 2
            #pragma unroll
                for (int j = 0; j < 4; ++j) r[j] = cvl_hmul2_bits(cvl_pack_bits(pv[1][q * 4 + j]), sh[j % 2]);
                cvl_stsm_x4(so_st + q * 32, r[0], r[1], r[2], r[3]);
            }
            __syncwarp();
            #pragma unroll
            for (int i = 0; i < 4; ++i) {  // 16 rows of 8 chunks of 16 bytes
                const int c = i * 32 + lane;
                const int m = m0 + warp_row + c / 8;
                const int n = n0 + c % 8 * 8;
                __stcs(reinterpret_cast<uint4*>(&b4[c0 * 8192 + m * 128 + n]), *reinterpret_cast<const uint4*>(so + c / 8 * 72 + c % 8 * 8));
            }
        }
    }
}
