#!/usr/bin/env python3
"""Probe: what a one-node CUDA graph costs against launching its kernel directly, and whether any way
of building, instantiating or launching the graph costs less.

Every pipeline's ``graph`` block is replayed as one graph launch (LANGUAGE.md), and ``cuvil-dsl
bench`` times it so. For elementwise_f32 the one-node graph has measured 0.3-0.4% slower than the
same kernel launched directly (``ab_rows.py --launch-vs-graph``, ``ab_layout.py``), about half of
its gap to torch.compile; for small pipelines the share is larger. This times, in interleaved
rounds and as the bench does (``GpuTimer``: L2 flushed before each sample, median), a replica of
the library's elementwise kernel (``ab_stream.SOURCE``'s ``vec2``) at 2^26 and 2^20 elements and an
empty one-block kernel, each:

* launched directly on the stream;
* replayed from a graph captured by CuPy and uploaded (what ``runtime.graphs.GraphRunner`` does);
* replayed from the same capture instantiated by the driver with each of the flags
  ``cuGraphInstantiateWithFlags`` takes that could matter: none (the control), ``USE_NODE_PRIORITY``,
  ``DEVICE_LAUNCH`` (a graph the device may launch; the host launches it here), each uploaded first;
* replayed from a graph built node by node (``cuGraphAddKernelNode``), not captured.

Each configuration that writes y is checked against float64 first.

    python3 benchmarks/graph_probe.py [--rounds 3]   # writes $OUT/graph_probe.md when OUT is set

Exit status 2 when there is no GPU, 1 when a result is wrong.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from ab_stream import SOURCE  # noqa: E402
from raw_gpu import emit, open_gpu  # noqa: E402

EMPTY = r'''
extern "C" __global__ void empty_kernel(float* y) { if (y == nullptr) y[threadIdx.x] = 0.0f; }
'''
# cuGraphInstantiateWithFlags's flags (CUgraphInstantiate_flags)
FLAGS = {"none": 0, "USE_NODE_PRIORITY": 8, "DEVICE_LAUNCH": 4}
CAPTURE_THREAD_LOCAL = 1  # CUstreamCaptureMode


class Driver:
    """The few driver calls CuPy does not expose, by ctypes; each raises RuntimeError on failure."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise RuntimeError(f"{name}: {text.value.decode() if text.value else rc}")

    def capture(self, stream, launch) -> ctypes.c_void_p:
        """The graph of what ``launch()`` puts on ``stream`` (a CuPy stream), captured by the driver."""
        graph = ctypes.c_void_p()
        self.call("cuStreamBeginCapture_v2", ctypes.c_void_p(stream.ptr), ctypes.c_int(CAPTURE_THREAD_LOCAL))
        try:
            launch()
        finally:
            self.call("cuStreamEndCapture", ctypes.c_void_p(stream.ptr), ctypes.byref(graph))
        return graph

    def kernel_graph(self, function, grid: int, block: int, args: list[int]) -> ctypes.c_void_p:
        """A graph of one kernel node built with cuGraphAddKernelNode (``args``: device pointers)."""

        class Params(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS (v1)
            _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                        ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                        ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint),
                        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)), ("extra", ctypes.POINTER(ctypes.c_void_p))]

        graph, node = ctypes.c_void_p(), ctypes.c_void_p()
        self.call("cuGraphCreate", ctypes.byref(graph), ctypes.c_uint(0))
        values = [ctypes.c_void_p(a) for a in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        handle = function.kernel.ptr  # a CuPy RawKernel's CUfunction
        params = Params(ctypes.c_void_p(handle), grid, 1, 1, block, 1, 1, 0,
                        ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p)), None)
        self.call("cuGraphAddKernelNode", ctypes.byref(node), graph, None, ctypes.c_size_t(0), ctypes.byref(params))
        return graph

    def instantiate(self, graph, flags: int, stream) -> ctypes.c_void_p:
        """``graph`` instantiated with ``flags`` and uploaded on ``stream``."""
        exe = ctypes.c_void_p()
        self.call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, ctypes.c_ulonglong(flags))
        self.call("cuGraphUpload", exe, ctypes.c_void_p(stream.ptr))
        return exe

    def launcher(self, exe, stream):
        fn, handle, on = self.lib.cuGraphLaunch, exe, ctypes.c_void_p(stream.ptr)

        def launch() -> None:
            rc = fn(handle, on)
            if rc:
                raise RuntimeError(f"cuGraphLaunch: {rc}")

        return launch


def configurations(cp, driver: Driver, stream, label: str, function, grid: int, block: int, args: tuple) -> dict:
    """``label``'s ways to run ``function<<<grid, block>>>(args)`` on ``stream``: label -> launch()."""
    runs = {f"{label}: launched directly": lambda: function((grid,), (block,), args, stream=stream)}
    capture = cp.cuda.Stream(non_blocking=True)
    with capture:
        capture.begin_capture()
        function((grid,), (block,), args, stream=capture)
        graph = capture.end_capture()
    graph.upload(stream)
    runs[f"{label}: CuPy graph, uploaded (the library's way)"] = lambda: graph.launch(stream)
    _keep.append(graph)
    try:
        raw = driver.capture(capture, lambda: function((grid,), (block,), args, stream=capture))
    except Exception as exc:
        print(f"graph_probe: {label}: driver capture failed: {exc}", file=sys.stderr)
        raw = None
    for name, flags in FLAGS.items():
        if raw is None:
            break
        try:
            runs[f"{label}: driver graph, flags {name}"] = driver.launcher(driver.instantiate(raw, flags, stream), stream)
        except Exception as exc:
            print(f"graph_probe: {label}: flags {name}: {exc}", file=sys.stderr)
    try:
        built = driver.kernel_graph(function, grid, block, [int(a.data.ptr) for a in args])
        runs[f"{label}: graph built node by node"] = driver.launcher(driver.instantiate(built, 0, stream), stream)
    except Exception as exc:
        print(f"graph_probe: {label}: cuGraphAddKernelNode: {exc}", file=sys.stderr)
    return runs


_keep: list = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    gpu = open_gpu("graph_probe")
    if gpu is None:
        return 2
    cp, name, _sms, timer = gpu
    driver = Driver()
    stream = cp.cuda.Stream(non_blocking=True)  # as the executor's work stream
    module = cp.RawModule(code=SOURCE + EMPTY, options=("-std=c++17",))
    vec2, empty = module.get_function("vec2"), module.get_function("empty_kernel")
    rs = cp.random.RandomState(int.from_bytes(os.urandom(4), "little"))
    runs: dict = {}
    outputs: dict = {}  # label prefix -> (x, y, float64 want)
    for n in (1 << 26, 1 << 20):
        x = rs.standard_normal(n, dtype=cp.float32)
        y = cp.empty_like(x)
        label = f"vec2, 2^{n.bit_length() - 1}"
        outputs[label] = (x, y, cp.maximum(x.astype(cp.float64) * 1.5 + 0.25, 0.0) * 2.0 - 0.5)
        runs.update(configurations(cp, driver, stream, label, vec2, n // 1024, 128, (x, y)))
    sink = cp.empty(128, cp.float32)
    runs.update(configurations(cp, driver, stream, "empty kernel, one block", empty, 1, 128, (sink,)))

    ok, checks = True, {}
    for label, fn in runs.items():
        prefix = label.split(":")[0]
        if prefix not in outputs:
            checks[label] = 0.0
            continue
        x, y, want = outputs[prefix]
        y.fill(cp.nan)
        stream.synchronize()
        fn()
        stream.synchronize()
        err = float(cp.max(cp.abs(y.astype(cp.float64) - want) / (1e-6 + 1e-6 * cp.abs(want))))
        checks[label] = err
        ok &= err <= 1.0
    times: dict[str, list[float]] = {label: [] for label in runs}
    labels = list(runs)
    for r in range(args.rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:  # each round starts one later
            if checks[label] <= 1.0:
                times[label].append(timer.measure(runs[label], stream).median_us)
        print(f"round {r + 1} done", flush=True)

    def median(ts: list[float]) -> float:
        return sorted(ts)[len(ts) // 2] if ts else float("nan")

    lines = [f"# graph_probe on {name}\n",
             f"GpuTimer (L2 flushed before each sample), median of each round; {args.rounds} rotated rounds\n",
             "| configuration | rounds (us) | median | minus direct launch (us) | check (error / tolerance) |",
             "|---|---|---|---|---|"]
    for label, ts in times.items():
        direct = median(times[label.split(":")[0] + ": launched directly"])
        med = median(ts)
        lines.append(f"| {label} | {' / '.join(f'{t:.2f}' for t in ts)} | {med:.2f} | {med - direct:+.2f} | "
                     f"{'ok' if checks[label] <= 1.0 else 'WRONG'} ({checks[label]:.2g}) |")
    emit("\n".join(lines) + "\n", "graph_probe.md")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
