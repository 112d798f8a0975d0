// cuvil-dsl kernel masked (matmul_softmax) of pipeline attention_f16, domain [2, 70, 300]
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

extern "C" __global__ void __launch_bounds__(128, 1) cvl_masked(
    const __half* __restrict__ b0,  // k: f16[B, N, D] input
    const __half* __restrict__ b1,  // q: f16[B, M, D] input
    const unsigned char* __restrict__ b2,  // causal: bool[M, N] input
    __half* __restrict__ b3,  // p: f16[B, M, N] output
    float u0,  // %3: f16[] scalar
    float u1  // %7: f16[] scalar
) {
    extern __shared__ __align__(16) unsigned char cvl_smem[];
    __half* const sa = reinterpret_cast<__half*>(cvl_smem);
    __half* const sb = sa + 4608;
    const int lane = threadIdx.x % 32;
    const int wm = (threadIdx.x / 32) / 4 * 16;
    const int wn = (threadIdx.x / 32) % 4 * 16;
    float acc[1][2][4];
    const int mt = blockIdx.x % 5;
    const int bz = blockIdx.x / 5;
    const int c0 = (bz) % 2;
    const int m0 = mt * 16;
    const __half* pa = b1 + (int)c0 * 4480;
    const __half* pb = b0 + (int)c0 * 19200;
    #pragma unroll
    for (int mi = 0; mi < 1; ++mi)
    #pragma unroll
        for (int ni = 0; ni < 2; ++ni)
    #pragma unroll
            for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
    float row_max[2], row_sum[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_max[r] = (-__int_as_float(0x7f800000));
        row_sum[r] = 0;
    }
    if (0 < 10) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = m0 + r;
            const int gk = (0) % 1 * 64 + cc;
            const bool ok = gmn < 70 && gk < 64;
            __half* dst = sa + (0) * 1152 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pa + (int)gmn * 64 + (int)gk * 1 : pa, ok);
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = (0) / 1 % 5 * 64 + r;
            const int gk = (0) % 1 * 64 + cc;
            const bool ok = gmn < 300 && gk < 64;
            __half* dst = sb + (0) * 4608 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
        }
    }
    cvl_cp_commit();
    if (1 < 10) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = m0 + r;
            const int gk = (1) % 1 * 64 + cc;
            const bool ok = gmn < 70 && gk < 64;
            __half* dst = sa + (1) * 1152 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pa + (int)gmn * 64 + (int)gk * 1 : pa, ok);
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = (1) / 1 % 5 * 64 + r;
            const int gk = (1) % 1 * 64 + cc;
            const bool ok = gmn < 300 && gk < 64;
            __half* dst = sb + (1) * 4608 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
        }
    }
    cvl_cp_commit();
    if (2 < 10) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = m0 + r;
            const int gk = (2) % 1 * 64 + cc;
            const bool ok = gmn < 70 && gk < 64;
            __half* dst = sa + (2) * 1152 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pa + (int)gmn * 64 + (int)gk * 1 : pa, ok);
        }
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = i * 128 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = (2) / 1 % 5 * 64 + r;
            const int gk = (2) % 1 * 64 + cc;
            const bool ok = gmn < 300 && gk < 64;
            __half* dst = sb + (2) * 4608 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
        }
    }
    cvl_cp_commit();
    for (int step = 0; step < 10; ++step) {
        cvl_cp_wait<2>();
        __syncthreads();
        if (step + 3 < 10) {
            #pragma unroll
            for (int i = 0; i < 1; ++i) {
                const int c = i * 128 + threadIdx.x;
                const int r = c / 8;
                const int cc = c % 8 * 8;
                const int gmn = m0 + r;
                const int gk = ((step + 3)) % 1 * 64 + cc;
                const bool ok = gmn < 70 && gk < 64;
                __half* dst = sa + ((step + 3) % 4) * 1152 + r * 72 + cc;
                cvl_cp_async16(dst, ok ? pa + (int)gmn * 64 + (int)gk * 1 : pa, ok);
            }
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = i * 128 + threadIdx.x;
                const int r = c / 8;
                const int cc = c % 8 * 8;
                const int gmn = ((step + 3)) / 1 % 5 * 64 + r;
                const int gk = ((step + 3)) % 1 * 64 + cc;
                const bool ok = gmn < 300 && gk < 64;
                __half* dst = sb + ((step + 3) % 4) * 4608 + r * 72 + cc;
                cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
            }
        }
        cvl_cp_commit();
        {
            const __half* ta = sa + (step % 4) * 1152;
            const __half* tb = sb + (step % 4) * 4608;
            #pragma unroll
            for (int kk = 0; kk < 64; kk += 16) {
                unsigned af[1][4];
                unsigned bf[2][2];
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi) cvl_ldsm_x4(af[mi], ta + (wm + mi * 16 + (lane / 8) % 2 * 8 + lane % 8) * 72 + kk + lane / 16 * 8);
                #pragma unroll
                for (int nj = 0; nj < 1; ++nj) {
                    unsigned r[4];
                    cvl_ldsm_x4(r, tb + (wn + nj * 16 + lane / 16 * 8 + lane % 8) * 72 + kk + (lane / 8) % 2 * 8);
                    bf[2 * nj][0] = r[0]; bf[2 * nj][1] = r[1];
                    bf[2 * nj + 1][0] = r[2]; bf[2 * nj + 1][1] = r[3];
                }
            #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
            #pragma unroll
                    for (int ni = 0; ni < 2; ++ni) cvl_mma(acc[mi][ni], af[mi], bf[ni]);
            }
        }
        if (step % 1 == 0) {
            const int n0 = step / 1 % 5 * 64;
            if (step < 5) {
                float tile_max[2], tile_sum[2], rescale[2];
                #pragma unroll
                for (int r = 0; r < 2; ++r) { tile_max[r] = (-__int_as_float(0x7f800000)); tile_sum[r] = 0; }
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
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
                    float s = (-__int_as_float(0x7f800000));
                    if (m < 70 && n < 300) {
                        const float t1 = ACC;
                        const float t2 = cvl_f16((t1 * u0));
                        const float t3 = ((b2[m * 300 + n] != 0) ? t2 : u1);
                        s = t3;
                    }
                    ACC = s;
                    tile_max[slot] = cvl_max(tile_max[slot], s);
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float top = cvl_max(row_max[r], cvl_warp_max(tile_max[r], 4));
                    rescale[r] = row_max[r] == top ? 1 : expf(row_max[r] - top);
                    row_max[r] = top;
                }
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
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
                    tile_sum[slot] += ACC == (-__int_as_float(0x7f800000)) ? 0 : expf(ACC - row_max[slot]);
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    row_sum[r] = row_sum[r] * rescale[r] + cvl_warp_sum(tile_sum[r], 4);
                if (step == 4) {
                    __shared__ float warp_max[4][16], warp_sum[4][16];
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        if (lane % 4 == 0) {
                            warp_max[(threadIdx.x / 32 % 4)][(wm + (r) / 2 * 16 + (r) % 2 * 8 + lane / 4)] = row_max[r];
                            warp_sum[(threadIdx.x / 32 % 4)][(wm + (r) / 2 * 16 + (r) % 2 * 8 + lane / 4)] = row_sum[r];
                        }
                    }
                    __syncthreads();
                    #pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        float top = warp_max[0][(wm + (r) / 2 * 16 + (r) % 2 * 8 + lane / 4)];
                    #pragma unroll
                        for (int w = 1; w < 4; ++w) top = cvl_max(top, warp_max[w][(wm + (r) / 2 * 16 + (r) % 2 * 8 + lane / 4)]);
                        float total = 0;
                    #pragma unroll
                        for (int w = 0; w < 4; ++w) {
                            const float m = warp_max[w][(wm + (r) / 2 * 16 + (r) % 2 * 8 + lane / 4)];
                            total += warp_sum[w][(wm + (r) / 2 * 16 + (r) % 2 * 8 + lane / 4)] * (m == top ? 1 : expf(m - top));
                        }
                        row_max[r] = top;
                        row_sum[r] = total;
                    }
                }
            } else {
                #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
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
                    if (m < 70 && n < 300) {
                        const float t4 = ACC;
                        const float t5 = cvl_f16((t4 * u0));
                        const float t6 = ((b2[m * 300 + n] != 0) ? t5 : u1);
                        const float t7 = cvl_f16(expf(t6 - row_max[slot]) / row_sum[slot]);
                        b3[c0 * 21000 + m * 300 + n] = __float2half_rn(t7);
                    }
                }
            }
            #pragma unroll
            for (int mi = 0; mi < 1; ++mi)
            #pragma unroll
                for (int ni = 0; ni < 2; ++ni)
            #pragma unroll
                    for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
        }
    }
}
