// cuvil-dsl kernel main_k1 (matmul) of pipeline gemm_bf16, domain [200, 136]
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

// D (64 x 128, f32) += A (64 x 16, descriptor) * B (16 x 128, descriptor); trans-a 0, trans-b 1
__device__ __forceinline__ void cvl_wgmma(float (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "n"(1));
}
// Pins the accumulators between wgmma's asynchronous writes and ordinary reads or writes.
__device__ __forceinline__ void cvl_wgmma_pin(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
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

extern "C" __global__ void __launch_bounds__(256, 1) cvl_main_k1(
    const __nv_bfloat16* __restrict__ b0,  // x: bf16[T, D] input
    const __nv_bfloat16* __restrict__ b1,  // w: bf16[D, F] input
    __nv_bfloat16* __restrict__ b2,  // y: bf16[T, F] output
    const __grid_constant__ cvl_tensor_map tma_a,  // TMA descriptor of x: 200 x 256, box 128 x 64
    const __grid_constant__ cvl_tensor_map tma_b  // TMA descriptor of w: 256 x 136, box 64 x 64
) {
    extern __shared__ __align__(1024) unsigned char cvl_smem[];
    const unsigned smem0 = (cvl_smem_addr(cvl_smem) + 1023u) & ~1023u;
    const unsigned sa = smem0;
    const unsigned sb = smem0 + 65536u;
    const int lane = threadIdx.x % 32;
    const int wg = threadIdx.x / 128;
    const int wl = (threadIdx.x / 32) % 4;
    const unsigned long long desc_a = cvl_wgmma_desc(sa + wg * 8192u, 16u, 1024u);
    const unsigned long long desc_b = cvl_wgmma_desc(sb, 8192u, 1024u);
    float acc[64];
    __shared__ __align__(8) unsigned long long cvl_full[4];
    const unsigned full0 = cvl_smem_addr(cvl_full);
    if (threadIdx.x == 0) {
        cvl_tma_prefetch(tma_a);
        cvl_tma_prefetch(tma_b);
        for (int s = 0; s < 4; ++s) cvl_mbar_init(full0 + s * 8, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int nt = blockIdx.x % 2;
    const int mt = blockIdx.x / 2 % 2;
    const int bz = blockIdx.x / 4;
    const int m0 = mt * 128;
    const __nv_bfloat16* pa = b0 + 0;
    const __nv_bfloat16* pb = b1 + 0;
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    const int n0 = nt * 128;
    cvl_wgmma_pin(acc);
    if (0 < 4) {
        if (threadIdx.x == 0) {
            const unsigned bar = full0 + (0) * 8;
            cvl_mbar_expect_tx(bar, 32768u);
            cvl_tma_2d(sa + (0) * 16384u, tma_a, (0) * 64, m0, bar);
            cvl_tma_2d(sb + (0) * 16384u + 0u, tma_b, n0 + 0, (0) * 64, bar);
            cvl_tma_2d(sb + (0) * 16384u + 8192u, tma_b, n0 + 64, (0) * 64, bar);
        }
    }
    if (1 < 4) {
        if (threadIdx.x == 0) {
            const unsigned bar = full0 + (1) * 8;
            cvl_mbar_expect_tx(bar, 32768u);
            cvl_tma_2d(sa + (1) * 16384u, tma_a, (1) * 64, m0, bar);
            cvl_tma_2d(sb + (1) * 16384u + 0u, tma_b, n0 + 0, (1) * 64, bar);
            cvl_tma_2d(sb + (1) * 16384u + 8192u, tma_b, n0 + 64, (1) * 64, bar);
        }
    }
    #pragma unroll 1
    for (int step = 0; step < 4; ++step) {
        cvl_mbar_wait(full0 + (step % 4) * 8, (step / 4) & 1);
        __syncthreads();
        if (step + 2 < 4) {
            if (threadIdx.x == 0) {
                const unsigned bar = full0 + ((step + 2) % 4) * 8;
                cvl_mbar_expect_tx(bar, 32768u);
                cvl_tma_2d(sa + ((step + 2) % 4) * 16384u, tma_a, ((step + 2)) * 64, m0, bar);
                cvl_tma_2d(sb + ((step + 2) % 4) * 16384u + 0u, tma_b, n0 + 0, ((step + 2)) * 64, bar);
                cvl_tma_2d(sb + ((step + 2) % 4) * 16384u + 8192u, tma_b, n0 + 64, ((step + 2)) * 64, bar);
            }
        }
        cvl_wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const unsigned long long da = desc_a + (((step % 4) * 16384 + kk * 32) >> 4);
            const unsigned long long db = desc_b + (((step % 4) * 16384 + kk * 2048) >> 4);
            cvl_wgmma(acc, da, db);
        }
        cvl_wgmma_commit();
        cvl_wgmma_wait<1>();
    }
    cvl_wgmma_wait<0>();
    cvl_wgmma_pin(acc);
    __nv_bfloat16* const cvl_stage = reinterpret_cast<__nv_bfloat16*>(cvl_smem + (smem0 - cvl_smem_addr(cvl_smem)));  // the tile's outputs, 136 a row
    __syncthreads();  // every warpgroup is past its last wgmma: the stages are free
    #pragma unroll
    for (int ni = 0; ni < 16; ++ni)
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = m0 + wg * 64 + wl * 16 + lane / 4 + h * 8;
        const int n = n0 + ni * 8 + lane % 4 * 2;
        const int slot = h;
        (void)slot;
        float& ACC0 = acc[ni * 4 + h * 2];
        float& ACC1 = acc[ni * 4 + h * 2 + 1];
        if (m < 200 && n < 136) {
            const float t1 = ACC0;
            const float t2 = cvl_bf16(cvl_silu(t1));
            const float t3 = ACC1;
            const float t4 = cvl_bf16(cvl_silu(t3));
            *reinterpret_cast<__nv_bfloat162*>(&cvl_stage[(m - m0) * 136 + (n - n0)]) = __halves2bfloat162(__float2bfloat16_rn(cvl_silu(t1)), __float2bfloat16_rn(cvl_silu(t3)));
        }
    }
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + wg) : "memory");  // the warpgroup's 64 rows are staged
    #pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int c = i * 128 + threadIdx.x % 128;
        const int r = wg * 64 + c / 16;
        const int m = m0 + r;
        const int n = n0 + c % 16 * 8;
        if (m < 200 && n < 136) {
            *reinterpret_cast<uint4*>(&b2[m * 136 + n]) = *reinterpret_cast<const uint4*>(&cvl_stage[r * 136 + (n - n0)]);
        }
    }
}
