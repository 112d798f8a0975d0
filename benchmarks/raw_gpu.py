"""The GPU a raw-kernel benchmark script (write_ceiling.py, ab_stream.py) runs on.

``open_gpu(tool)`` gives CuPy, the device's name and multiprocessor count, and a
``bench.timing.GpuTimer`` that times as ``cuvil-dsl bench`` does (L2 flushed before every sample,
median of 100-400), or None after saying on stderr why there is no GPU to run on (the scripts then
exit with status 2).
"""

from __future__ import annotations

import sys

from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings


def open_gpu(tool: str):
    """(cupy, device name, multiprocessors, timer), or None when there is no GPU."""
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as exc:
        print(f"{tool}: no GPU to run on ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    timer = GpuTimer(CudaClock(), Settings(budget_s=0.05, min_samples=100, max_samples=400))
    return cp, name, int(props["multiProcessorCount"]), timer


def emit(text: str, filename: str) -> None:
    """Print a script's report and write it to ``$OUT/filename`` when OUT is set (the device tool
    brings back what is under $OUT)."""
    import os
    from pathlib import Path

    print(text)
    out = os.environ.get("OUT")
    if out:
        Path(out, filename).write_text(text)
