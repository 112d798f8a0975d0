// cuvil-dsl kernel main_k1 (row) of pipeline norms, domain [21, 96]
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
__device__ __forceinline__ float cvl_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
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

extern "C" __global__ void __launch_bounds__(256, 1) cvl_main_k1(
    const __half* __restrict__ b0,  // x: f16[T, H] input
    const __half* __restrict__ b1,  // w: f16[H] input
    const __half* __restrict__ b2,  // b: f16[H] input
    const __nv_bfloat16* __restrict__ b3,  // u: bf16[T, H] input
    const __nv_bfloat16* __restrict__ b4,  // g: bf16[H] input
    __half* __restrict__ b5,  // y: f16[T, H] output
    __half* __restrict__ b6,  // y2: f16[T, H] output
    __nv_bfloat16* __restrict__ b7,  // r: bf16[T, H] output
    float u0  // %4: bf16[] scalar
) {
    const int tid = threadIdx.x % 32;
    const int row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row < 21) {
        const int c0 = row;
        float c26[1][8];
        float c27[1][8];
        #pragma unroll
        for (int s = 0; s < 1; ++s) {
            const int sv = s * 32 + tid;
            if (sv < 12) {
                __align__(16) __half raw28[8];
                cvl_copy_vec<__half, 8>(raw28, b0 + c0 * 96 + sv * 8);
                #pragma unroll
                for (int e = 0; e < 8; ++e) {
                    c26[s][e] = __half2float(raw28[e]);
                }
                __align__(16) __nv_bfloat16 raw29[8];
                cvl_copy_vec<__nv_bfloat16, 8>(raw29, b3 + c0 * 96 + sv * 8);
                #pragma unroll
                for (int e = 0; e < 8; ++e) {
                    c27[s][e] = __bfloat162float(raw29[e]);
                }
            }
        }
        float acc_0 = (0.0f);
        float acc_2 = (0.0f);
        #pragma unroll
        for (int s = 0; s < 1; ++s) {
            const int sv = s * 32 + tid;
            if (sv < 12) {
                #pragma unroll
                for (int e = 0; e < 8; ++e) {
                    acc_0 = (acc_0 + c26[s][e]);
                    const float t31 = (c27[s][e] * c27[s][e]);
                    acc_2 = (acc_2 + t31);
                }
            }
        }
        const float r_0 = cvl_warp_sum(acc_0, 32);
        const float r_2 = cvl_warp_sum(acc_2, 32);
        float acc_1 = (0.0f);
        const float t35 = (r_0 / (96.0f));
        #pragma unroll
        for (int s = 0; s < 1; ++s) {
            const int sv = s * 32 + tid;
            if (sv < 12) {
                #pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float t36 = (c26[s][e] - t35);
                    const float t37 = (t36 * t36);
                    acc_1 = (acc_1 + t37);
                }
            }
        }
        const float r_1 = cvl_warp_sum(acc_1, 32);
        const float t62 = (r_1 / (96.0f));
        const float t63 = (t62 + (1e-05f));
        const float t64 = sqrtf(t63);
        const float t65 = ((1.0f) / t64);
        const float t70 = (r_2 / (96.0f));
        const float t71 = (t70 + (1e-06f));
        const float t72 = sqrtf(t71);
        const float t73 = ((1.0f) / t72);
        #pragma unroll
        for (int s = 0; s < 1; ++s) {
            const int sv = s * 32 + tid;
            if (sv < 12) {
                __align__(16) __half raw55[8];
                cvl_copy_vec<__half, 8>(raw55, b1 + sv * 8);
                __align__(16) __half raw56[8];
                cvl_copy_vec<__half, 8>(raw56, b2 + sv * 8);
                __align__(16) __nv_bfloat16 raw57[8];
                cvl_copy_vec<__nv_bfloat16, 8>(raw57, b4 + sv * 8);
                __align__(16) __half out58[8];
                __align__(16) __half out59[8];
                __align__(16) __nv_bfloat16 out60[8];
                #pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float t61 = (c26[s][e] - t35);
                    const float t66 = (t61 * t65);
                    const float t67 = (t66 * __half2float(raw55[e]));
                    const float t68 = cvl_f16((t67 + __half2float(raw56[e])));
                    out58[e] = __float2half_rn(t68);
                    const float t69 = cvl_f16((t61 * t65));
                    out59[e] = __float2half_rn(t69);
                    const float t74 = (c27[s][e] * t73);
                    const float t75 = (t74 * __bfloat162float(raw57[e]));
                    const float t76 = cvl_bf16((t75 * u0));
                    out60[e] = __float2bfloat16_rn(t76);
                }
                cvl_copy_vec<__half, 8>(b5 + c0 * 96 + sv * 8, out58);
                cvl_copy_vec<__half, 8>(b6 + c0 * 96 + sv * 8, out59);
                cvl_copy_vec<__nv_bfloat16, 8>(b7 + c0 * 96 + sv * 8, out60);
            }
        }
    }
}
