# cuvil-dsl kernel norm (row) of pipeline layernorm_affine, domain [32, 1024]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1], uint16[::1], uint16[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_norm(
    b0,  # x: f16[T, H] input
    b1,  # w: f16[H] input
    b2,  # b: f16[H] input
    b3,  # y: f16[T, H] output
):
    for q in numba.prange(32):
        c0 = q
        row1 = np.empty(1024, np.float32)
        for c1 in range(1024):
            row1[c1] = cvl.f16_to_f32(b0[c0 * 1024 + c1])
        part2 = np.full(8, np.float32(0.0))
        for c1_ in range(0, 1024, 8):
            for e in range(8):
                part2[e] = (part2[e] + row1[c1_ + e])
        r3 = part2[0]
        for e in range(1, 8):
            r3 = (r3 + part2[e])
        row4 = np.empty(1024, np.float32)
        t5 = (r3 / np.float32(1024.0))
        for c1 in range(1024):
            t6 = (row1[c1] - t5)
            t7 = (t6 * t6)
            row4[c1] = t7
        part8 = np.full(8, np.float32(0.0))
        for c1_ in range(0, 1024, 8):
            for e in range(8):
                part8[e] = (part8[e] + row4[c1_ + e])
        r9 = part8[0]
        for e in range(1, 8):
            r9 = (r9 + part8[e])
        t11 = (r9 / np.float32(1024.0))
        t12 = (t11 + np.float32(1e-05))
        t13 = np.sqrt(t12)
        t14 = (np.float32(1.0) / t13)
        for c1 in range(1024):
            t10 = (row1[c1] - t5)
            t15 = (t10 * t14)
            t16 = (t15 * cvl.f16_to_f32(b1[c1]))
            t17 = cvl.round_f16((t16 + cvl.f16_to_f32(b2[c1])))
            b3[c0 * 1024 + c1] = cvl.f32_to_f16((t16 + cvl.f16_to_f32(b2[c1])))
