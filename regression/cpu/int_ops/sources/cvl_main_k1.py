# cuvil-dsl kernel main_k1 (reduce) of pipeline int_ops, domain [8192]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(int32[::1], int32[::1], int32[::1], int32[::1], float32[::1], int32, int32, int32, int32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # a: i32[N] input
    b1,  # b: i32[N] input
    b2,  # c: i32[N] output
    b3,  # total: i32[1] output
    b4,  # half: f32[N] output
    u0,  # %2: i32[] scalar
    u1,  # %6: i32[] scalar
    u2,  # %8: i32[] scalar
    u3,  # %12: i32[] scalar
    u4,  # %21: f32[] scalar
):
    for q in numba.prange(1):
        row1 = np.empty(8192, np.int32)
        for c0 in range(8192):
            t2 = (b0[c0] > b1[c0])
            t3 = (b0[c0] == u3)
            t4 = (t2 | t3)
            t5 = np.int32(b0[c0] * b1[c0])
            t6 = np.int32(u0 * b0[c0])
            t7 = np.int32(t5 + t6)
            t8 = np.int32(t7 - b1[c0])
            t9 = max(t8, u1)
            t10 = min(t9, u2)
            t11 = np.int32(b1[c0] - b0[c0])
            t12 = max(t11, np.int32(0))
            t13 = (t10 if t4 else t12)
            row1[c0] = t13
        part14 = np.full(8, np.int32(0))
        for c0_ in range(0, 8192, 8):
            for e in range(8):
                part14[e] = np.int32(part14[e] + row1[c0_ + e])
        r15 = part14[0]
        for e in range(1, 8):
            r15 = np.int32(r15 + part14[e])
        r15 = r15
        for c0 in range(8192):
            b2[c0] = row1[c0]
            t16 = np.float32(row1[c0])
            t17 = (t16 * u4)
            b4[c0] = t17
        b3[0] = r15
