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

// 2^x by the MUFU (relative error below 2^-21; -inf -> 0, NaN -> NaN); subnormal results flush to 0.
__device__ __forceinline__ float cvl_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

extern "C" __global__ void __launch_bounds__(32, 5) cvl_masked(
    const __half* __restrict__ b0,  // k: f16[B, N, D] input
    const __half* __restrict__ b1,  // q: f16[B, M, D] input
    const int* __restrict__ b2,  // kpos: i32[1, N] input
    const int* __restrict__ b3,  // qpos: i32[M, 1] input
    __half* __restrict__ b4,  // p: f16[B, M, N] output
    float u0,  // %3: f16[] scalar
    float u1  // %7: f16[] scalar
) {
    extern __shared__ __align__(16) unsigned char cvl_smem[];
    __half* const sa = reinterpret_cast<__half*>(cvl_smem);  // the A band, later output staging
    __half* const sb = sa + 1152;  // 4 B tiles
    const int lane = threadIdx.x % 32;
    const int wm = threadIdx.x / 32 * 16;  // this warp's rows of the band
    const int wn = 0;
    float acc[1][8][4];
    unsigned af[1][4][4];  // the warp's A rows, all of K
    const int mt = blockIdx.x % 5;
    const int bz = blockIdx.x / 5;
    const int c0 = (bz) % 2;
    const int m0 = mt * 16;
    const __half* pa = b1 + (int)c0 * 4480;
    const __half* pb = b0 + (int)c0 * 19200;
    float row_max[2], row_sum[2], row_base[2], row_norm[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_max[r] = (-__int_as_float(0x7f800000));
        row_sum[r] = 0.0f;
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int c = i * 32 + threadIdx.x;
        const int r = c / 8;
        const int cc = c % 8 * 8;
        const int gmn = m0 + r;
        const int gk = 0 + cc;
        const bool ok = gmn < 70 && gk < 64;
        __half* dst = sa + (0) * 1152 + r * 72 + cc;
        cvl_cp_async16(dst, ok ? pa + (int)gmn * 64 + (int)gk * 1 : pa, ok);
    }
    cvl_cp_commit();
    if (0 < 10) {
        #pragma unroll
        for (int i = 0; i < 16; ++i) {
            const int c = i * 32 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = (0) % 5 * 64 + r;
            const int gk = 0 + cc;
            const bool ok = gmn < 300 && gk < 64;
            __half* dst = sb + (0) * 4608 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
        }
    }
    cvl_cp_commit();
    if (1 < 10) {
        #pragma unroll
        for (int i = 0; i < 16; ++i) {
            const int c = i * 32 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = (1) % 5 * 64 + r;
            const int gk = 0 + cc;
            const bool ok = gmn < 300 && gk < 64;
            __half* dst = sb + (1) * 4608 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
        }
    }
    cvl_cp_commit();
    if (2 < 10) {
        #pragma unroll
        for (int i = 0; i < 16; ++i) {
            const int c = i * 32 + threadIdx.x;
            const int r = c / 8;
            const int cc = c % 8 * 8;
            const int gmn = (2) % 5 * 64 + r;
            const int gk = 0 + cc;
            const bool ok = gmn < 300 && gk < 64;
            __half* dst = sb + (2) * 4608 + r * 72 + cc;
            cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
        }
    }
    cvl_cp_commit();
    cvl_cp_wait<3>();
    __syncthreads();
    #pragma unroll
    for (int mi = 0; mi < 1; ++mi)
    #pragma unroll
        for (int kq = 0; kq < 4; ++kq) cvl_ldsm_x4(af[mi][kq], sa + (wm + mi * 16 + (lane / 8) % 2 * 8 + lane % 8) * 72 + kq * 16 + lane / 16 * 8);
    for (int step = 0; step < 10; ++step) {
        cvl_cp_wait<2>();
        __syncthreads();
        if (step + 3 < 10) {
            #pragma unroll
            for (int i = 0; i < 16; ++i) {
                const int c = i * 32 + threadIdx.x;
                const int r = c / 8;
                const int cc = c % 8 * 8;
                const int gmn = (step + 3) % 5 * 64 + r;
                const int gk = 0 + cc;
                const bool ok = gmn < 300 && gk < 64;
                __half* dst = sb + ((step + 3) % 4) * 4608 + r * 72 + cc;
                cvl_cp_async16(dst, ok ? pb + (int)gmn * 64 + (int)gk * 1 : pb, ok);
            }
        }
        cvl_cp_commit();
        #pragma unroll
        for (int mi = 0; mi < 1; ++mi)
        #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
        #pragma unroll
                for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
        {
            const __half* tb = sb + (step % 4) * 4608;
            #pragma unroll
            for (int kq = 0; kq < 4; ++kq) {
                unsigned bf[8][2];
                #pragma unroll
                for (int nj = 0; nj < 4; ++nj) {
                    unsigned r[4];
                    cvl_ldsm_x4(r, tb + (wn + nj * 16 + lane / 16 * 8 + lane % 8) * 72 + kq * 16 + (lane / 8) % 2 * 8);
                    bf[2 * nj][0] = r[0]; bf[2 * nj][1] = r[1];
                    bf[2 * nj + 1][0] = r[2]; bf[2 * nj + 1][1] = r[3];
                }
            #pragma unroll
                for (int mi = 0; mi < 1; ++mi)
            #pragma unroll
                    for (int ni = 0; ni < 8; ++ni) cvl_mma(acc[mi][ni], af[mi][kq], bf[ni]);
            }
        }
        const int n0 = step % 5 * 64;
        if (step < 5) {
            float tile_max[2], base[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) tile_max[r] = (-__int_as_float(0x7f800000));
            #pragma unroll
            for (int mi = 0; mi < 1; ++mi)
            #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
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
                    const bool t1 = (b2[n] <= b3[m]);
                    const float t2 = ACC;
                    const float t3 = cvl_f16((t2 * u0));
                    const float t4 = (t1 ? t3 : u1);
                    s = t4;
                }
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
            }
            #pragma unroll
            for (int mi = 0; mi < 1; ++mi)
            #pragma unroll
            for (int ni = 0; ni < 8; ++ni)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
            #pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int m = m0 + wm + mi * 16 + lane / 4 + h * 8;
                const int n = n0 + wn + ni * 8 + lane % 4 * 2 + q;
                const int slot = mi * 2 + h;
                float& ACC = acc[mi][ni][h * 2 + q];
                row_sum[slot] += cvl_ex2(fmaf(ACC, 1.4426950408889634f, -base[slot]));
            }
            if (step == 4) {
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float top = cvl_warp_max(row_max[r], 4);
                    row_base[r] = __fmul_rn(top, 1.4426950408889634f);
                    const float part = row_max[r] == top ? row_sum[r]
                                       : row_sum[r] * cvl_ex2(__fmul_rn(row_max[r], 1.4426950408889634f) - row_base[r]);
                    const float total = cvl_warp_sum(part, 4);
                    row_max[r] = top;
                    row_norm[r] = 1.0f / total;
                }
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
                const int n = n0 + wn + ni * 8 + lane % 4 * 2 + q;
                const int slot = mi * 2 + h;
                float& ACC = acc[mi][ni][h * 2 + q];
                if (m < 70 && n < 300) {
                    const bool t5 = (b2[n] <= b3[m]);
                    const float t6 = ACC;
                    const float t7 = cvl_f16((t6 * u0));
                    const float t8 = (t5 ? t7 : u1);
                    const float t9 = cvl_f16(cvl_ex2(fmaf(t8, 1.4426950408889634f, -row_base[slot])) * row_norm[slot]);
                    b4[c0 * 21000 + m * 300 + n] = __float2half_rn(t9);
                }
            }
        }
    }
}
