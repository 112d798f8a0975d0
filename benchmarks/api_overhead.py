"""Host overhead of a pipeline call through the Python API, against a raw CuPy graph replay.

Issue 7's target: 8 dependent small kernels in one graph (benchmarks/small_graph.yaml), called
through the Python API and synchronised, wall clock p50, at most 1.25x a raw CuPy graph replay
of the same graph (``Graph.launch`` + synchronise, no Python API around it). Both are measured
here in one process, interleaved in rounds so drift hits both alike, plus a cProfile of the API
call to show where the host time goes. Two more raw rows split the difference: the same replay on
the caller's stream (the API queues there, so results are ordered with the caller's work), and
that plus a new result array and the device copy out of the arena (the API's floor by design). Also: rebinding a new device array every call (the graph's
kernel nodes rewritten in place) and a call on NumPy inputs (copies both ways).

Run on the GPU machine: ``python3 benchmarks/api_overhead.py``; writes ``$OUT/api_overhead.md``.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CALLS = 400
ROUNDS = 5


def wall_us(fn, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def main() -> int:
    import cupy

    import cuvil_dsl

    program = cuvil_dsl.load(ROOT / "benchmarks" / "small_graph.cuvil")
    compiled = program.compile(backend="cuda")
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.normal(size=(64, 64)).astype(np.float32))
    compiled(x)
    cupy.cuda.Device().synchronize()
    [executor] = compiled.executors.values()
    [key] = compiled.graphs.keys()
    runner = compiled.graphs.get(key)
    graph, stream = runner.executable, executor.stream

    def raw():
        graph.launch(stream)
        stream.synchronize()

    caller = cupy.cuda.get_current_stream()  # the API queues on the caller's stream (here the default one)
    out_buffer = executor._current["y"]

    def raw_caller_stream():  # the replay on the stream the API uses: what the stream itself costs
        graph.launch(caller)
        caller.synchronize()

    def raw_copy():  # + a new result array and the copy out of the arena: the API's floor by design
        graph.launch(caller)
        out = cupy.ndarray(out_buffer.shape, out_buffer.dtype)
        cupy.cuda.runtime.memcpyAsync(out.data.ptr, out_buffer.data.ptr, out_buffer.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToDevice, caller.ptr)
        caller.synchronize()

    # the same copy as a kernel launched from a prebuilt parameter array (cuLaunchKernel, as the
    # executor launches its kernels): is a launch cheaper on the host than cudaMemcpyAsync D2D?
    import ctypes

    from cupy_backends.cuda.api import driver

    copy_fn = cupy.RawKernel(r"""
    extern "C" __global__ void cvl_copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned n) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
    }""", "cvl_copy16")
    copy_fn.compile()
    cells = (ctypes.c_void_p(out_buffer.data.ptr), ctypes.c_void_p(0), ctypes.c_uint32(out_buffer.nbytes // 16))
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(c) for c in cells))
    blocks = max(1, min(132, -(-out_buffer.nbytes // 16 // 256)))

    def raw_copy_kernel():
        graph.launch(caller)
        out = cupy.ndarray(out_buffer.shape, out_buffer.dtype)
        cells[1].value = out.data.ptr
        driver.launchKernel(copy_fn.kernel.ptr, blocks, 1, 1, 256, 1, 1, 0, caller.ptr, ctypes.addressof(params), 0)
        caller.synchronize()
        return out

    assert out_buffer.nbytes % 16 == 0 and bool((raw_copy_kernel() == out_buffer).all()), "copy kernel is wrong"

    def api():
        compiled(x)
        cupy.cuda.get_current_stream().synchronize()

    fresh = [cupy.asarray(rng.normal(size=(64, 64)).astype(np.float32)) for _ in range(2)]
    flip = [0]

    def api_rebind():  # a different device array every call: kernel nodes rewritten in place
        flip[0] ^= 1
        compiled(fresh[flip[0]])
        cupy.cuda.get_current_stream().synchronize()

    host = x.get()

    def api_numpy():
        compiled(host)

    fns = {"raw": raw, "raw_caller_stream": raw_caller_stream, "raw_copy": raw_copy,
           "raw_copy_kernel": raw_copy_kernel, "api": api,
           "api_rebind": api_rebind, "api_numpy": api_numpy}
    samples = {name: [] for name in fns}
    for fn in fns.values():
        wall_us(fn, 50)  # warm-up
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            samples[name] += wall_us(fn, CALLS)
    captures = compiled.graphs.stats
    raw_p50 = statistics.median(samples["raw"])
    lines = ["# API overhead: small_graph (8 kernels, one graph), wall clock per call + synchronise", "",
             f"{ROUNDS} rounds x {CALLS} calls each, interleaved; graph stats after: {captures}", "",
             "| path | p50 us | p10 us | p90 us | ratio to raw replay |", "|---|---|---|---|---|"]
    for name, values in samples.items():
        q = statistics.quantiles(values, n=10)
        p50 = statistics.median(values)
        lines.append(f"| {name} | {p50:.1f} | {q[0]:.1f} | {q[-1]:.1f} | {p50 / raw_p50:.2f} |")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        compiled(x)
    cupy.cuda.get_current_stream().synchronize()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    lines += ["", "cProfile of 2000 API calls (no synchronise), by own time:", "", "```",
              text.getvalue().strip()[-4000:], "```"]
    compiled.close()
    report = "\n".join(lines) + "\n"
    print(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "api_overhead.md").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
