# cuvil-dsl kernel main_k1 (row) of pipeline rmsnorm_scaled, domain [128, 256]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1], uint16[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: bf16[T, H] input
    b1,  # w: bf16[H] input
    b2,  # y: bf16[T, H] output
):
    for q in numba.prange(128):
        c0 = q
        row1 = np.empty(256, np.float32)
        for c1 in range(256):
            t2 = (cvl.bf16_to_f32(b0[c0 * 256 + c1]) * cvl.bf16_to_f32(b0[c0 * 256 + c1]))
            row1[c1] = t2
        part3 = np.full(8, np.float32(0.0))
        for c1_ in range(0, 256, 8):
            for e in range(8):
                part3[e] = (part3[e] + row1[c1_ + e])
        r4 = part3[0]
        for e in range(1, 8):
            r4 = (r4 + part3[e])
        t5 = (r4 / np.float32(256.0))
        t6 = (t5 + np.float32(1e-06))
        t7 = np.sqrt(t6)
        t8 = (np.float32(1.0) / t7)
        for c1 in range(256):
            t9 = (cvl.bf16_to_f32(b0[c0 * 256 + c1]) * t8)
            t10 = cvl.round_bf16((t9 * cvl.bf16_to_f32(b1[c1])))
            b2[c0 * 256 + c1] = cvl.f32_to_bf16((t9 * cvl.bf16_to_f32(b1[c1])))
