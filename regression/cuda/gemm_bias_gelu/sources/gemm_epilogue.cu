// cuvil-dsl kernel gemm_epilogue (matmul) of pipeline gemm_bias_gelu, domain [128, 256]
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

__device__ __forceinline__ void cvl_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(256, 1) cvl_gemm_epilogue(
    const __half* __restrict__ b0,  // a: f16[M, K] input
    const __half* __restrict__ b1,  // b: f16[K, N] input
    const __half* __restrict__ b2,  // bias: f16[N] input
    __half* __restrict__ b3  // y: f16[M, N] output
) {
    extern __shared__ __align__(16) unsigned char cvl_smem[];
    __half* const sa = reinterpret_cast<__half*>(cvl_smem);
    __half* const sb = sa + 10240;
    const int lane = threadIdx.x % 32;
    const int wm = (threadIdx.x / 32) / 4 * 32;
    const int wn = (threadIdx.x / 32) % 4 * 16;
    float acc[2][2][4];
    const int nt = blockIdx.x % 4;
    const int mt = blockIdx.x / 4 % 2;
    const int bz = blockIdx.x / 8;
    const int m0 = mt * 64;
    const __half* pa = b0 + 0;
    const __half* pb = b1 + 0;
    #pragma unroll
    for (int mi = 0; mi < 2; ++mi)
    #pragma unroll
        for (int ni = 0; ni < 2; ++ni)
    #pragma unroll
            for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
    const int n0 = nt * 64;
    if (0 < 4) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 256 + threadIdx.x;
            const int r = c / 4;
            const int cc = c % 4 * 8;
            const int gmn = m0 + r;
            const int gk = (0) * 32 + cc;
            const bool ok = gmn < 128 && gk < 128;
            __half* dst = sa + (0) * 2560 + r * 40 + cc;
            cvl_cp_async16(dst, ok ? pa + (int)gmn * 128 + (int)gk * 1 : pa, ok);
        }
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 256 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = n0 + cc;
            const int gk = (0) * 32 + r;
            const bool ok = gmn < 256 && gk < 128;
            __half* dst = sb + (0) * 2304 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 1 + (int)gk * 256 : pb, ok);
        }
    }
    cvl_cp_commit();
    if (1 < 4) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 256 + threadIdx.x;
            const int r = c / 4;
            const int cc = c % 4 * 8;
            const int gmn = m0 + r;
            const int gk = (1) * 32 + cc;
            const bool ok = gmn < 128 && gk < 128;
            __half* dst = sa + (1) * 2560 + r * 40 + cc;
            cvl_cp_async16(dst, ok ? pa + (int)gmn * 128 + (int)gk * 1 : pa, ok);
        }
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 256 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = n0 + cc;
            const int gk = (1) * 32 + r;
            const bool ok = gmn < 256 && gk < 128;
            __half* dst = sb + (1) * 2304 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 1 + (int)gk * 256 : pb, ok);
        }
    }
    cvl_cp_commit();
    if (2 < 4) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 256 + threadIdx.x;
            const int r = c / 4;
            const int cc = c % 4 * 8;
            const int gmn = m0 + r;
            const int gk = (2) * 32 + cc;
            const bool ok = gmn < 128 && gk < 128;
            __half* dst = sa + (2) * 2560 + r * 40 + cc;
            cvl_cp_async16(dst, ok ? pa + (int)gmn * 128 + (int)gk * 1 : pa, ok);
        }
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 256 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = n0 + cc;
            const int gk = (2) * 32 + r;
            const bool ok = gmn < 256 && gk < 128;
            __half* dst = sb + (2) * 2304 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 1 + (int)gk * 256 : pb, ok);
        }
    }
    cvl_cp_commit();
    for (int step = 0; step < 4; ++step) {
        cvl_cp_wait<2>();
        __syncthreads();
        if (step + 3 < 4) {
            #pragma unroll
            for (int i = 0; i < 1; ++i) {
                const int c = i * 256 + threadIdx.x;
                const int r = c / 4;
                const int cc = c % 4 * 8;
                const int gmn = m0 + r;
                const int gk = ((step + 3)) * 32 + cc;
                const bool ok = gmn < 128 && gk < 128;
                __half* dst = sa + ((step + 3) % 4) * 2560 + r * 40 + cc;
                cvl_cp_async16(dst, ok ? pa + (int)gmn * 128 + (int)gk * 1 : pa, ok);
            }
            #pragma unroll
            for (int i = 0; i < 1; ++i) {
                const int c = i * 256 + threadIdx.x;
                const int r = c / 8;
                const int cc = c % 8 * 8;
                const int gmn = n0 + cc;
                const int gk = ((step + 3)) * 32 + r;
                const bool ok = gmn < 256 && gk < 128;
                __half* dst = sb + ((step + 3) % 4) * 2304 + r * 72 + cc;
                cvl_cp_async16(dst, ok ? pb + (int)gmn * 1 + (int)gk * 256 : pb, ok);
            }
        }
        cvl_cp_commit();
        {
            const __half* ta = sa + (step % 4) * 2560;
            const __half* tb = sb + (step % 4) * 2304;
            #pragma unroll
            for (int kk = 0; kk < 32; kk += 16) {
                unsigned af[2][4];
                unsigned bf[2][2];
                #pragma unroll
                for (int mi = 0; mi < 2; ++mi) cvl_ldsm_x4(af[mi], ta + (wm + mi * 16 + (lane / 8) % 2 * 8 + lane % 8) * 40 + kk + lane / 16 * 8);
                #pragma unroll
                for (int nj = 0; nj < 1; ++nj) {
                    unsigned r[4];
                    cvl_ldsm_x4_trans(r, tb + (kk + (lane / 8) % 2 * 8 + lane % 8) * 72 + wn + nj * 16 + lane / 16 * 8);
                    bf[2 * nj][0] = r[0]; bf[2 * nj][1] = r[1];
                    bf[2 * nj + 1][0] = r[2]; bf[2 * nj + 1][1] = r[3];
                }
            #pragma unroll
                for (int mi = 0; mi < 2; ++mi)
            #pragma unroll
                    for (int ni = 0; ni < 2; ++ni) cvl_mma(acc[mi][ni], af[mi], bf[ni]);
            }
        }
    }
    #pragma unroll
    for (int mi = 0; mi < 2; ++mi)
    #pragma unroll
    for (int ni = 0; ni < 2; ++ni)
    #pragma unroll
    for (int h = 0; h < 2; ++h)
    #pragma unroll
    for (int q = 0; q < 2; ++q) {
        const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
        const int n = n0 + wn + ni * 8 + lane % 4 * 2 + q;
        const int slot = mi * 2 + h;
        float& ACC = acc[mi][ni][h * 2 + q];
        if (m < 128 && n < 256) {
            const float t1 = ACC;
            const float t2 = (t1 + __half2float(b2[n]));
            const float t3 = cvl_f16(cvl_gelu(t2));
            b3[m * 256 + n] = __float2half_rn(t3);
        }
    }
}
