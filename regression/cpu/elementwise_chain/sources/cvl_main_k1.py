# cuvil-dsl kernel main_k1 (elementwise) of pipeline elementwise_chain, domain [32768]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32, float32, float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f32[N] input
    b1,  # y: f32[N] output
    u0,  # %1: f32[] scalar
    u1,  # %4: f32[] scalar
    u2,  # %8: f32[] scalar
    u3,  # %11: f32[] scalar
):
    for i in numba.prange(32768):
        t6 = (b0[i] * u0)
        t7 = (t6 + u1)
        t8 = cvl.relu_f32(t7)
        t9 = (t8 * u2)
        t10 = (t9 - u3)
        b1[i] = t10
