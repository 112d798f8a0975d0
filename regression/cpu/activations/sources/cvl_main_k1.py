# cuvil-dsl kernel main_k1 (elementwise) of pipeline activations, domain [128, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32[::1], float32[::1], float32, float32, float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f32[R, C] input
    b1,  # smooth: f32[R, C] output
    b2,  # logs: f32[R, C] output
    b3,  # waves: f32[R, C] output
    u0,  # %17: f32[] scalar
    u1,  # %36: f32[] scalar
    u2,  # %41: f32[] scalar
    u3,  # %45: f32[] scalar
):
    for i in numba.prange(16384):
        t40 = cvl.gelu_f32(b0[i])
        t41 = cvl.gelu_tanh_f32(b0[i])
        t42 = (t40 + t41)
        t43 = cvl.silu_f32(b0[i])
        t44 = (t42 + t43)
        t45 = cvl.sigmoid_f32(b0[i])
        t46 = (t44 + t45)
        t47 = cvl.tanh_f32(b0[i])
        t48 = (t46 + t47)
        t49 = cvl.erf_f32(b0[i])
        t50 = (t48 + t49)
        t51 = cvl.relu_f32(b0[i])
        t52 = (t50 + t51)
        t53 = abs(b0[i])
        t54 = (t52 + t53)
        b1[i] = t54
        t55 = abs(b0[i])
        t56 = (t55 + u0)
        t57 = cvl.log_f32(t56)
        t58 = cvl.log2_f32(t56)
        t59 = (t57 + t58)
        t60 = np.sqrt(t56)
        t61 = (t59 + t60)
        t62 = cvl.rsqrt_f32(t56)
        t63 = (t61 + t62)
        t64 = (-t56)
        t65 = cvl.exp_f32(t64)
        t66 = (t63 + t65)
        t67 = (-t56)
        t68 = cvl.exp2_f32(t67)
        t69 = (t66 + t68)
        b2[i] = t69
        t70 = cvl.sin_f32(b0[i])
        t71 = cvl.cos_f32(b0[i])
        t72 = (t70 * t71)
        t73 = cvl.fmaximum(b0[i], u1)
        t74 = (t72 + t73)
        t75 = cvl.fminimum(b0[i], u2)
        t76 = (t74 - t75)
        t77 = (b0[i] ** u3)
        t78 = (t76 + t77)
        b3[i] = t78
