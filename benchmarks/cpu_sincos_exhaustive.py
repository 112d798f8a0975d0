#!/usr/bin/env python3
"""Every f32 through the CPU backend's sin_f32 and cos_f32 (cuvil_dsl.codegen.cpu_prelude), against float64's sin
and cos rounded to f32:

    python3 benchmarks/cpu_sincos_exhaustive.py [--stride N]

Prints, for each, the largest distance in representable floats and the input where it occurs, and fails (exit 1) if
a non-finite input does not give NaN or sin loses the sign of a zero. ``--stride N`` checks every N-th block of 2^24
floats only (a quick look); the whole range takes about 8 minutes on 2 cores (session 19: at most 1 for both).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuvil_dsl.codegen import cpu_prelude as cvl  # noqa: E402

BLOCK = 1 << 24


@numba.njit(parallel=True)
def _sin(x, out):
    for i in numba.prange(x.size):
        out[i] = cvl.sin_f32(x[i])


@numba.njit(parallel=True)
def _cos(x, out):
    for i in numba.prange(x.size):
        out[i] = cvl.cos_f32(x[i])


def ordinal(v: np.ndarray) -> np.ndarray:
    """The floats' order as integers (-0 and +0 both 0), so a difference counts representable floats."""
    i = v.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=1, help="check every N-th block of 2^24 floats")
    args = ap.parse_args()
    worst = {"sin": (0, 0.0), "cos": (0, 0.0)}
    started = time.perf_counter()
    for start in range(0, 1 << 32, BLOCK * args.stride):
        x = np.arange(start, start + BLOCK, dtype=np.uint64).astype(np.uint32).view(np.float32)
        finite = np.isfinite(x)
        for name, run, exact in (("sin", _sin, np.sin), ("cos", _cos, np.cos)):
            got = np.empty_like(x)
            run(x, got)
            if not np.isnan(got[~finite]).all():
                print(f"{name}: a non-finite input did not give NaN", file=sys.stderr)
                return 1
            with np.errstate(invalid="ignore"):
                want = exact(x[finite].astype(np.float64)).astype(np.float32)
            off = np.abs(ordinal(got[finite]) - ordinal(want))
            i = int(np.argmax(off))
            if off[i] > worst[name][0]:
                worst[name] = (int(off[i]), float(x[finite][i]))
            zeros = finite & (x == 0)
            if name == "sin" and (np.signbit(got[zeros]) != np.signbit(x[zeros])).any():
                print("sin: the sign of a zero was lost", file=sys.stderr)
                return 1
    for name, (off, at) in worst.items():
        print(f"{name}_f32: at most {off} ulp from float64's, rounded (largest at x = {at!r})")
    print(f"{(1 << 32) // args.stride:,} floats in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
