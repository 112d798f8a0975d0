#!/usr/bin/env python3
"""Clocks and power while the 4096^3 GEMM runs back to back: ours against cuBLAS and PyTorch.

The GEMM benchmarks run into the H200's power limit (cuBLAS alone varies 180-210 us between rounds of
one script), and session 11's probes put most of our gap to cuBLAS in the main loop. If our kernel
draws the same power at a lower SM clock than cuBLAS, it spends more energy per flop and the power cap
turns that into time; if it runs at the same clock, the gap is in the kernel's schedule. This runs each
contender back to back for about ``--seconds`` (no L2 flush: a steady state) while ``nvidia-smi`` samples
the SM clock, the power draw and the temperature every 50 ms, and reports the medians of the samples
taken in the second half of each run, with the time per call over that half.

Contenders: the library's kernel for benchmarks/gemm_gelu_f16.yaml (``gelu(a @ b + bias)``, the
default mode of ``ab_wgmma.py``, and with ``--modes`` others of its LIBRARY_MODES), ``cupy.matmul`` (cuBLAS, no epilogue) and, when PyTorch is
installed, ``F.gelu(torch.addmm(bias, a, b))`` (cuBLASLt with its epilogue).

    python3 benchmarks/gemm_power.py [--seconds 3] [--modes multicast,warp-specialised]   # $OUT/gemm_power.md

Exit status 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from raw_gpu import emit, open_gpu  # noqa: E402

SIZE = 4096
QUERY = "clocks.sm,power.draw,temperature.gpu"


def sampled(cp, fn, seconds: float) -> tuple[float, list[list[float]]]:
    """Run ``fn`` back to back for about ``seconds`` under nvidia-smi sampling; (us a call over the second
    half, samples of the second half as [clock MHz, power W, temperature C])."""
    fn()
    cp.cuda.runtime.deviceSynchronize()
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    try:
        start = time.perf_counter()
        half_at, half_calls, calls = None, 0, 0
        while time.perf_counter() - start < seconds:
            for _ in range(20):
                fn()
            calls += 20
            cp.cuda.runtime.deviceSynchronize()
            if half_at is None and time.perf_counter() - start >= seconds / 2:
                half_at, half_calls = time.perf_counter(), calls
        elapsed = time.perf_counter() - half_at
    finally:
        smi.terminate()
        out, _ = smi.communicate(timeout=5)
    rows = [[float(v) for v in line.split(",")] for line in out.strip().splitlines() if line.count(",") == 2]
    return elapsed / (calls - half_calls) * 1e6, rows[len(rows) // 2:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--modes", default="", help="also the ab_wgmma LIBRARY_MODES whose labels contain one of "
                                                   "these comma-separated texts (the default always)")
    args = parser.parse_args(argv)
    gpu = open_gpu("gemm_power")
    if gpu is None:
        return 2
    cp, name, _sms, _timer = gpu
    import numpy as np

    import ab_wgmma

    wanted = [w.strip() for w in args.modes.split(",") if w.strip()]
    modes = [m for i, m in enumerate(ab_wgmma.LIBRARY_MODES)
             if i == 0 or (any(w in m[0] for w in wanted) and "probe" not in m[0])]
    library = ab_wgmma.build_library(modes)
    rs = cp.random.RandomState(1234)
    a = (rs.standard_normal((SIZE, SIZE), dtype=cp.float32) * 0.05).astype(cp.float16)
    b = (rs.standard_normal((SIZE, SIZE), dtype=cp.float32) * 0.05).astype(cp.float16)
    bias = (rs.standard_normal((SIZE,), dtype=cp.float32) * 0.1).astype(cp.float16)
    y = cp.empty((SIZE, SIZE), cp.float16)
    runs = {}
    for label, *_switches in modes:
        k, u = library[((SIZE, SIZE, SIZE), label)]
        runs[f"cuvil-dsl: {label}"] = ab_wgmma.library_launch(k, u, a, b, bias, y)
    runs["cupy.matmul (cuBLAS, no epilogue)"] = lambda: cp.matmul(a, b)
    try:
        import torch
        import torch.nn.functional as F

        ta, tb, tbias = (torch.from_dlpack(t) for t in (a, b, bias))
        runs["torch addmm + gelu"] = lambda: F.gelu(torch.addmm(tbias, ta, tb))
    except Exception as exc:
        print(f"gemm_power: no torch row ({type(exc).__name__}: {exc})", file=sys.stderr)
    lines = [f"# gemm_power on {name}\n", f"4096^3 f16, back to back for {args.seconds:g} s each, twice in turn; "
             "medians over the second half of each run (nvidia-smi every 50 ms)\n",
             "| contender | pass | us a call | TFLOP/s | SM clock MHz | power W | temperature C | samples |",
             "|---|---|---|---|---|---|---|---|"]
    for rep in (1, 2):
        for label, fn in runs.items():
            us, rows = sampled(cp, fn, args.seconds)
            med = np.median(np.asarray(rows), axis=0) if rows else [float("nan")] * 3
            lines.append(f"| {label} | {rep} | {us:.1f} | {2 * SIZE ** 3 / us / 1e6:.0f} | {med[0]:.0f} | {med[1]:.0f} | "
                         f"{med[2]:.0f} | {len(rows)} |")
            print(lines[-1], flush=True)
    emit("\n".join(lines) + "\n", "gemm_power.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
