"""CUDA C spellings: what differs from :class:`~cuvil_dsl.codegen.base.Language`, and the prelude.

The prelude holds the device helpers the op templates call. They exist where CUDA's own
functions do not match NumPy: ``fmaxf`` drops NaN (``cvl_max`` keeps it), signed overflow is
undefined in C (i32 arithmetic goes through unsigned), and a named f16/bf16 value is rounded
to its dtype and back (``cvl_f16``). Float to i32 is ``__float2int_rz``: PTX's ``cvt.rzi``
already truncates, saturates and sends NaN to 0, as the language asks.
"""

from __future__ import annotations

import math

from cuvil_dsl.codegen.base import Language
from cuvil_dsl.types import DType

STORAGE = {DType.F16: "__half", DType.BF16: "__nv_bfloat16", DType.F32: "float", DType.F64: "double",
           DType.I32: "int", DType.BOOL: "unsigned char"}

_F32_FUNCS = {"abs": "fabsf", "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf",
              "rsqrt": "rsqrtf", "sin": "sinf", "cos": "cosf", "tanh": "tanhf", "erf": "erff", "pow": "powf"}
_F64_FUNCS = {"abs": "fabs", "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt",
              "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tanh": "tanh", "erf": "erf", "pow": "pow"}
_FAST_F32 = {"exp": "__expf", "log": "__logf", "log2": "__log2f", "sin": "__sinf", "cos": "__cosf",
             "pow": "__powf"}
_HELPERS = {"maximum": "cvl_max", "minimum": "cvl_min", "relu": "cvl_relu", "sigmoid": "cvl_sigmoid",
            "silu": "cvl_silu", "gelu": "cvl_gelu", "gelu_tanh": "cvl_gelu_tanh", "abs": "cvl_abs"}


class CudaLanguage(Language):
    int_templates = {"add": "cvl_wrap_add({a}, {b})", "sub": "cvl_wrap_sub({a}, {b})",
                     "mul": "cvl_wrap_mul({a}, {b})", "neg": "cvl_wrap_neg({x})"}

    def __init__(self, fast_math: bool = False):
        f32 = {**_F32_FUNCS, **(_FAST_F32 if fast_math else {})}
        names = set(f32) | set(_HELPERS)
        self.functions = {
            op: {"float": _HELPERS.get(op, f32.get(op)), "double": _HELPERS.get(op, _F64_FUNCS.get(op)),
                 "int": _HELPERS.get(op, op)}
            for op in names
        }
        # fabsf is right for floats; the helper exists for i32 (two's-complement wrap of INT_MIN)
        self.functions["abs"]["float"], self.functions["abs"]["double"] = f32["abs"], "fabs"

    def literal(self, value, dtype: DType) -> str:
        if dtype is DType.BOOL:
            return "true" if value else "false"
        if dtype is DType.I32:
            v = int(value)
            return "(-2147483647 - 1)" if v == -(2**31) else str(v)
        v = float(value)
        double = dtype is DType.F64
        if math.isnan(v):
            return "__longlong_as_double(0x7ff8000000000000LL)" if double else "__int_as_float(0x7fc00000)"
        if math.isinf(v):
            text = "__longlong_as_double(0x7ff0000000000000LL)" if double else "__int_as_float(0x7f800000)"
            return f"(-{text})" if v < 0 else text
        text = repr(v)
        return f"({text})" if double else f"({text}f)" if "e" in text or "." in text else f"({text}.0f)"

    def cast(self, x: str, src: DType, dst: DType) -> str:
        if src is dst:
            return x
        if src is DType.BOOL:
            return f"({x} ? {self.literal(1, dst)} : {self.literal(0, dst)})" if dst is not DType.BOOL else x
        if dst is DType.BOOL:
            return f"({x} != {self.literal(0, src)})"
        if dst in (DType.F16, DType.BF16):
            return f"cvl_{dst.value}({x})"
        if dst is DType.I32:
            return f"__double2int_rz({x})" if src is DType.F64 else f"__float2int_rz({x})"
        if dst is DType.F32:
            return f"__int2float_rn({x})" if src is DType.I32 else f"(float)({x})"
        return f"(double)({x})"

    def round(self, x: str, dtype: DType) -> str:
        return f"cvl_{dtype.value}({x})" if dtype in (DType.F16, DType.BF16) else x

    def load(self, ref: str, dtype: DType) -> str:
        """A stored element to its compute type."""
        if dtype is DType.F16:
            return f"__half2float({ref})"
        if dtype is DType.BF16:
            return f"__bfloat162float({ref})"
        if dtype is DType.BOOL:
            return f"({ref} != 0)"
        return ref

    def store(self, x: str, dtype: DType) -> str:
        """A compute-type value to its storage type (already rounded when named)."""
        if dtype is DType.F16:
            return f"__float2half_rn({x})"
        if dtype is DType.BF16:
            return f"__float2bfloat16_rn({x})"
        if dtype is DType.BOOL:
            return f"(unsigned char)({x})"
        return x


PRELUDE = r"""#include <cuda_fp16.h>
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
"""
