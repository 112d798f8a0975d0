# cuvil-dsl kernel main_k1 (reduce) of pipeline f64_chain, domain [128, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float64[::1], float64[::1], float64, float64, float64)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f64[R, C] input
    b1,  # y: f64[R, C] output
    u0,  # %2: f64[] scalar
    u1,  # %6: f64[] scalar
    u2,  # %12: f64[] scalar
):
    for q in numba.prange(128):
        c0 = q
        row1 = np.empty(128, np.float64)
        for c1 in range(128):
            t2 = np.tanh(b0[c0 * 128 + c1])
            t3 = (b0[c0 * 128 + c1] ** u0)
            t4 = (-t3)
            t5 = (t4 / u1)
            t6 = np.exp(t5)
            t7 = (t2 * t6)
            t8 = abs(b0[c0 * 128 + c1])
            t9 = np.sqrt(t8)
            t10 = (u2 * t9)
            t11 = (t7 + t10)
            row1[c1] = t11
        part12 = np.full(8, np.float64(0.0))
        for c1_ in range(0, 128, 8):
            for e in range(8):
                part12[e] = (part12[e] + row1[c1_ + e])
        r13 = part12[0]
        for e in range(1, 8):
            r13 = (r13 + part12[e])
        t14 = (r13 / np.float64(128.0))
        for c1 in range(128):
            t15 = (row1[c1] - t14)
            b1[c0 * 128 + c1] = t15
