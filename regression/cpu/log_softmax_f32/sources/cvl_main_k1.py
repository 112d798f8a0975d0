# cuvil-dsl kernel main_k1 (row) of pipeline log_softmax_f32, domain [128, 250]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f32[R, C] input
    b1,  # y: f32[R, C] output
    u0,  # %0: f32[] scalar
):
    for q in numba.prange(128):
        c0 = q
        row1 = np.empty(250, np.float32)
        for c1 in range(250):
            t2 = (b0[c0 * 250 + c1] / u0)
            row1[c1] = t2
        part3 = np.full(8, np.float32(-np.inf))
        for c1_ in range(0, 248, 8):
            for e in range(8):
                part3[e] = cvl.fmaximum(part3[e], row1[c1_ + e])
        for c1 in range(248, 250):
            part3[0] = cvl.fmaximum(part3[0], row1[c1])
        r4 = part3[0]
        for e in range(1, 8):
            r4 = cvl.fmaximum(r4, part3[e])
        row5 = np.empty(250, np.float32)
        for c1 in range(250):
            t6 = (row1[c1] - r4)
            t7 = cvl.exp_f32(t6)
            row5[c1] = t7
        part8 = np.full(8, np.float32(0.0))
        for c1_ in range(0, 248, 8):
            for e in range(8):
                part8[e] = (part8[e] + row5[c1_ + e])
        for c1 in range(248, 250):
            part8[0] = (part8[0] + row5[c1])
        r9 = part8[0]
        for e in range(1, 8):
            r9 = (r9 + part8[e])
        t11 = cvl.log_f32(r9)
        for c1 in range(250):
            t10 = (row1[c1] - r4)
            t12 = (t10 - t11)
            b1[c0 * 250 + c1] = t12
