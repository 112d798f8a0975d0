// cuvil-dsl kernel forward_k1 (elementwise) of pipeline attention, domain [64, 128]
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

// elementwise template: 128 threads, 8-element vectors, 2 per step, 4 blocks, streaming 0, chunked
extern "C" __global__ void __launch_bounds__(128, 1) cvl_forward_k1(
    const int* __restrict__ b0,  // kpos: i32[1, N] input
    const int* __restrict__ b1,  // qpos: i32[M, 1] input
    unsigned char* __restrict__ b2  // causal: bool[M, N] output
) {
    const int stride = (int)gridDim.x * 128;
    const int c = (int)blockIdx.x * 256 + threadIdx.x;
    if (c + 128 < 1024) {
        const int i0_0 = c * 8;
        const int c0_0 = i0_0 / 128;
        const int c1_0 = i0_0 % 128;
        __align__(16) int in2[8];
        cvl_copy_vec<int, 8>(in2, b0 + c1_0);
        const int i0_1 = (c + 128) * 8;
        const int c0_1 = i0_1 / 128;
        const int c1_1 = i0_1 % 128;
        __align__(16) int in5[8];
        cvl_copy_vec<int, 8>(in5, b0 + c1_1);
        {
            __align__(16) unsigned char out3[8];
            #pragma unroll
            for (int e = 0; e < 8; ++e) {
                const bool t4 = (in2[e] <= b1[c0_0]);
                out3[e] = (unsigned char)(t4);
            }
            cvl_copy_vec<unsigned char, 8>(b2 + i0_0, out3);
        }
        {
            __align__(16) unsigned char out6[8];
            #pragma unroll
            for (int e = 0; e < 8; ++e) {
                const bool t7 = (in5[e] <= b1[c0_1]);
                out6[e] = (unsigned char)(t7);
            }
            cvl_copy_vec<unsigned char, 8>(b2 + i0_1, out6);
        }
    } else {
        for (int v = c; v < 1024; v += 128) {
            const int i0 = v * 8;
            const int c0 = i0 / 128;
            const int c1 = i0 % 128;
            __align__(16) int in8[8];
            cvl_copy_vec<int, 8>(in8, b0 + c1);
            __align__(16) unsigned char out9[8];
            #pragma unroll
            for (int e = 0; e < 8; ++e) {
                const bool t10 = (in8[e] <= b1[c0]);
                out9[e] = (unsigned char)(t10);
            }
            cvl_copy_vec<unsigned char, 8>(b2 + i0, out9);
        }
    }
}
