#!/usr/bin/env python3
"""A/B: does where the input and the output lie in memory change a streaming kernel's time?

elementwise_f32 (``y = relu(x*1.5 + 0.25)*2 - 0.5``, f32, 2^26 elements) has been 0.3-0.8% behind
torch.compile in every ``cuvil-dsl bench`` run, of which the spec's one-node graph costs 0.35%
(``ab_rows.py --launch-vs-graph``); a replica of the library's kernel on two separate CuPy
allocations measured 130.9 us (``ab_stream.py``), about torch.compile's time. The difference left
is where the buffers lie: the library puts every buffer of a pipeline in one arena (x at +256 bytes,
y 2^28 + 512 bytes after it), PyTorch's caching allocator gives each tensor its own 2 MiB-aligned
segment. This times, in interleaved rounds and as ``cuvil-dsl bench`` does (``GpuTimer``: L2
flushed before each sample, median):

* torch.compile's kernel on torch tensors (the bench's baseline);
* a replica of the library's kernel (``ab_stream.SOURCE``'s ``vec2``: 128 threads, two 16-byte
  vectors a thread, a block's 1024 elements contiguous) on the same torch tensors;
* the replica with x and y at chosen offsets inside one allocation: the arena's, adjacent, and
  y moved on by 4 KiB ... 2 MiB; on two separate CuPy allocations; the arena's layout replayed
  from a CUDA graph of one kernel node; the replica with plain loads (``ld.global``, as Triton
  emits them) instead of the read-only path;
* the library's own kernel through its executor: the spec's graph replayed (what the bench times)
  and the kernel launched directly.

Every configuration is checked against float64 before it is timed.

Measured (H200, 2026-11-30, `benchmarks/results/2026-11-30-h200-ab_layout-session11{,-2}.md`): every
configuration between 130.4 and 131.7 us; the library's graph replay 131.2-131.3 in all five rounds of
the second call, torch.compile 131.0-131.7: no placement, load path or graph stands out of the noise.

    python3 benchmarks/ab_layout.py [--rounds 3]   # writes $OUT/ab_layout.md when OUT is set

Exit status 2 when there is no GPU, 1 when a result is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from ab_stream import N, SOURCE  # noqa: E402
from raw_gpu import emit, open_gpu  # noqa: E402

# the replica with plain 16-byte loads (ld.global, as Triton emits them) instead of the read-only path
# (LDG.CONSTANT, which ptxas picks for the `const __restrict__` input of the library's kernel and of vec2)
PLAIN_SOURCE = SOURCE + r'''
extern "C" __global__ void __launch_bounds__(128, 1) vec2_plain(const float4* x, float4* y) {
    const int c = blockIdx.x * 256 + threadIdx.x;
    float4 a, b;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a.x), "=f"(a.y), "=f"(a.z), "=f"(a.w) : "l"(x + c));
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(b.x), "=f"(b.y), "=f"(b.z), "=f"(b.w) : "l"(x + c + 128));
    y[c] = op4(a);
    y[c + 128] = op4(b);
}
'''

BYTES = N * 4
ARENA_X = 256  # runtime.layout.ArenaLayout: guard band of 256 bytes, then x; its after-band; a guard; y
ARENA_Y = 256 + BYTES + 512
KIB = 1024
# (label, x offset, y offset) inside one allocation
PLACED = [
    ("arena layout (x +256, y = x + 2^28 + 512)", ARENA_X, ARENA_Y),
    ("adjacent (y = x + 2^28)", 0, BYTES),
    ("y = x + 2^28 + 4 KiB", 0, BYTES + 4 * KIB),
    ("y = x + 2^28 + 64 KiB", 0, BYTES + 64 * KIB),
    ("y = x + 2^28 + 1 MiB", 0, BYTES + 1024 * KIB),
    ("y = x + 2^28 + 2 MiB", 0, BYTES + 2048 * KIB),
    ("y = x + 2^28 + 2 MiB + 512", 0, BYTES + 2048 * KIB + 512),
]


library_stream = None


def library_runs(cp, host_x) -> dict:
    """The library's own kernel for benchmarks/elementwise_f32.yaml, through its executor (its arena, its
    stream): replayed from the spec's graph, as ``cuvil-dsl bench`` times it, and launched directly."""
    global library_stream
    import numpy as np

    from cuvil_dsl.driver import make_executor, open_spec
    from cuvil_dsl.reference.executor import HostHooks
    from cuvil_dsl.runtime.graphs import GraphRunner

    session = open_spec(ROOT / "benchmarks" / "elementwise_f32.yaml", backend="cuda")
    session.inputs["x"] = cp.asnumpy(host_x).astype(np.float32)
    executor = make_executor(session)
    executor.run(session.inputs, session.binding.params, HostHooks())  # checked, graph captured
    (kernel,) = [k for step in executor._steps for k in (step.kernels if isinstance(step, GraphRunner) else [step])]
    library_stream = executor.stream
    x, y = executor.arena.view("x"), executor.arena.view("y")
    work = executor._work
    _keep.append(executor)
    return {"library kernel, the spec's graph replayed (what the bench times)": (lambda: executor.execute(None), x, y),
            "library kernel, launched directly": (lambda: kernel.launch(work.ptr), x, y)}


_keep: list = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    gpu = open_gpu("ab_layout")
    if gpu is None:
        return 2
    cp, name, _sms, timer = gpu
    stream = cp.cuda.Stream.null
    module = cp.RawModule(code=PLAIN_SOURCE, options=("-std=c++17",))
    vec2 = module.get_function("vec2")
    vec2_plain = module.get_function("vec2_plain")
    rs = cp.random.RandomState(int.from_bytes(os.urandom(4), "little"))
    host_x = rs.standard_normal(N, dtype=cp.float32)
    want = cp.maximum(host_x.astype(cp.float64) * 1.5 + 0.25, 0.0) * 2.0 - 0.5

    def launcher(x, y):
        return lambda: vec2((N // 1024,), (128,), (x, y), stream=stream)

    runs: dict[str, tuple] = {}  # label -> (launch, output array)
    big = cp.empty(2 * BYTES + 4 * 1024 * KIB, dtype=cp.uint8)
    for label, ox, oy in PLACED:
        x = big[ox:ox + BYTES].view(cp.float32)
        y = big[oy:oy + BYTES].view(cp.float32)
        runs[label] = (launcher(x, y), x, y)
    ax, ay = big[ARENA_X:ARENA_X + BYTES].view(cp.float32), big[ARENA_Y:ARENA_Y + BYTES].view(cp.float32)
    runs["arena layout, plain loads (ld.global, not the read-only path)"] = (
        lambda: vec2_plain((N // 1024,), (128,), (ax, ay), stream=stream), ax, ay)
    sep_x, sep_y = cp.empty(N, cp.float32), cp.empty(N, cp.float32)
    runs["two CuPy allocations"] = (launcher(sep_x, sep_y), sep_x, sep_y)
    # the arena's layout from a one-node graph, as `ours` replays it
    gx = big[ARENA_X:ARENA_X + BYTES].view(cp.float32)
    gy = big[ARENA_Y:ARENA_Y + BYTES].view(cp.float32)
    capture = cp.cuda.Stream(non_blocking=True)
    with capture:
        capture.begin_capture()
        vec2((N // 1024,), (128,), (gx, gy), stream=capture)
        graph = capture.end_capture()
    graph.upload(stream)
    runs["arena layout, one-node graph replay"] = (lambda: graph.launch(stream), gx, gy)
    library = library_runs(cp, host_x)
    runs.update(library)
    try:
        import torch

        tx = torch.empty(N, dtype=torch.float32, device="cuda")
        ty = torch.empty_like(tx)
        compiled = torch.compile(lambda v: torch.relu(v * 1.5 + 0.25) * 2 - 0.5, dynamic=False)
        cx, cy = cp.from_dlpack(tx), cp.from_dlpack(ty)
        runs["replica on torch tensors"] = (launcher(cx, cy), cx, cy)
        holder = {}

        def inductor():
            holder["y"] = compiled(tx)

        runs["torch.compile on torch tensors"] = (inductor, cx, None)
        torch.cuda.synchronize()
    except Exception as exc:  # no torch: the layouts alone still answer the question
        print(f"ab_layout: no torch.compile row ({type(exc).__name__}: {exc})", file=sys.stderr)
        holder = None

    ok = True
    checks = {}
    for label, (fn, x, y) in runs.items():
        x[...] = host_x
        if y is not None:
            y.fill(cp.nan)
        cp.cuda.runtime.deviceSynchronize()
        fn()
        cp.cuda.runtime.deviceSynchronize()
        got = y if y is not None else cp.from_dlpack(holder["y"])
        err = float(cp.max(cp.abs(got.astype(cp.float64) - want) / (1e-6 + 1e-6 * cp.abs(want))))
        checks[label] = err
        ok &= err <= 1.0
    times: dict[str, list[float]] = {label: [] for label in runs}
    for r in range(args.rounds):
        for label, (fn, _x, _y) in runs.items():
            if checks[label] <= 1.0:
                on = library_stream if label in library else stream
                times[label].append(timer.measure(fn, on).median_us)
        print(f"round {r + 1}: " + ", ".join(f"{k[:24]} {v[-1]:.1f}" for k, v in times.items() if v), flush=True)
    def median(ts: list[float]) -> float:
        return sorted(ts)[len(ts) // 2] if ts else float("nan")

    base = median(times[PLACED[0][0]])
    lines = [f"# ab_layout on {name}\n",
             f"y = relu(x*1.5 + 0.25)*2 - 0.5, f32 2^26; GpuTimer (L2 flushed), median of each round; "
             f"{args.rounds} interleaved rounds\n",
             "| configuration | rounds (us) | median | vs arena layout | check (error / tolerance) |",
             "|---|---|---|---|---|"]
    for label, ts in times.items():
        med = median(ts)
        lines.append(f"| {label} | {' / '.join(f'{t:.1f}' for t in ts)} | {med:.1f} | {med / base:.4f} | "
                     f"{'ok' if checks[label] <= 1.0 else 'WRONG'} ({checks[label]:.2g}) |")
    emit("\n".join(lines) + "\n", "ab_layout.md")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
