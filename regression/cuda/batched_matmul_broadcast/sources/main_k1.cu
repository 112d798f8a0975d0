// cuvil-dsl kernel main_k1 (matmul) of pipeline batched_matmul_broadcast, domain [8, 32, 64]
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

extern "C" __global__ void __launch_bounds__(128, 1) cvl_main_k1(
    const float* __restrict__ b0,  // w: f32[1, N, K] input
    const float* __restrict__ b1,  // x: f32[G, M, K] input
    const float* __restrict__ b2,  // bias: f32[G, 1, N] input
    float* __restrict__ b3  // y: f32[G, M, N] output
) {
    __shared__ float sa[2][16][32];
    __shared__ float sb[2][16][32];
    const int tx = threadIdx.x % 8;
    const int ty = threadIdx.x / 8;
    float acc[2][4];
    float ra[4];
    float rb[4];
    const int nt = blockIdx.x % 2;
    const int mt = blockIdx.x / 2 % 1;
    const int bz = blockIdx.x / 2;
    const int c0 = (bz) % 8;
    const int m0 = mt * 32;
    const float* pa = b1 + (int)c0 * 2048;
    const float* pb = b0 + 0;
    #pragma unroll
    for (int i = 0; i < 2; ++i)
    #pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0;
    const int n0 = nt * 32;
    {
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int kk = c % 16;
            const int mm = c / 16;
            const int gmn = m0 + mm;
            const int gk = (0) * 16 + kk;
            ra[i] = (gmn < 32 && gk < 64) ? pa[(int)gmn * 64 + (int)gk * 1] : 0.0f;
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int kk = c % 16;
            const int mm = c / 16;
            const int gmn = n0 + mm;
            const int gk = (0) * 16 + kk;
            rb[i] = (gmn < 64 && gk < 64) ? pb[(int)gmn * 64 + (int)gk * 1] : 0.0f;
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int kk = c % 16;
            const int mm = c / 16;
            sa[0][kk][mm] = ra[i];
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int kk = c % 16;
            const int mm = c / 16;
            sb[0][kk][mm] = rb[i];
        }
    }
    __syncthreads();
    for (int step = 0; step < 4; ++step) {
        if (step + 1 < 4) {
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = i * 128 + threadIdx.x;
                const int kk = c % 16;
                const int mm = c / 16;
                const int gmn = m0 + mm;
                const int gk = (step + 1) * 16 + kk;
                ra[i] = (gmn < 32 && gk < 64) ? pa[(int)gmn * 64 + (int)gk * 1] : 0.0f;
            }
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = i * 128 + threadIdx.x;
                const int kk = c % 16;
                const int mm = c / 16;
                const int gmn = n0 + mm;
                const int gk = (step + 1) * 16 + kk;
                rb[i] = (gmn < 64 && gk < 64) ? pb[(int)gmn * 64 + (int)gk * 1] : 0.0f;
            }
        }
        {
            #pragma unroll
            for (int kk = 0; kk < 16; ++kk) {
                float fa[2], fb[4];
            #pragma unroll
                for (int i = 0; i < 2; ++i) fa[i] = sa[step % 2][kk][ty + i * 16];
            #pragma unroll
                for (int j = 0; j < 4; ++j) fb[j] = sb[step % 2][kk][tx + j * 8];
            #pragma unroll
                for (int i = 0; i < 2; ++i)
            #pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
            }
        }
        if (step + 1 < 4) {
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = i * 128 + threadIdx.x;
                const int kk = c % 16;
                const int mm = c / 16;
                sa[(step + 1) % 2][kk][mm] = ra[i];
            }
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = i * 128 + threadIdx.x;
                const int kk = c % 16;
                const int mm = c / 16;
                sb[(step + 1) % 2][kk][mm] = rb[i];
            }
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i)
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int m = m0 + ty + i * 16;
        const int n = n0 + tx + j * 8;
        const int slot = i;
        float& ACC = acc[i][j];
        if (m < 32 && n < 64) {
            const float t1 = ACC;
            const float t2 = (t1 + b2[c0 * 64 + n]);
            b3[c0 * 2048 + m * 64 + n] = t2;
        }
    }
}
