#!/usr/bin/env python3
"""What the L2 state before a sample costs a benchmark: cold inputs, or dirty lines to write back?

``cuvil-dsl bench`` clears a buffer of twice the L2 with a memset before each sample (as
``triton.testing.do_bench`` does): the inputs start in DRAM, and the L2 starts full of dirty
lines, which the kernel's own writes must evict (a write-back each). ``cuvil-dsl run`` replays back
to back instead. attention_f16 measures about 5 us (5%) more in the bench than in ``run``; this
splits that between the two causes. Each spec's executor (the bench's "ours": the spec's graphs
replayed on the executor's stream) is timed with CUDA events, in interleaved rounds, after:

* ``memset``: the bench's flush (cold inputs, dirty L2);
* ``read``: the same buffer read instead of written (cold inputs, a clean L2);
* ``memset+inputs``: the memset, then every input read (inputs in L2, the rest dirty);
* ``read+inputs``: the read, then every input read (inputs in L2, the rest clean);
* ``none``: nothing (back to back, as ``run``: the last sample's outputs dirty in L2);
* ``memset+pre``: the memset, then an empty kernel with the spec's first kernel's launch shape
  (grid, block, cluster, dynamic shared memory): whatever the switch from the memset's kernel to this
  shape costs the multiprocessors is paid before the sample.

With ``--tlb``, address translation instead (the 2 MB pages' entries in the GPU's TLBs, not the data in
L2): ``memset+touch`` and ``read+touch`` follow the flush with one byte read every 64 KB of the
executor's whole arena (inputs and outputs: 0.03% of its bytes into L2, every page's translation
fetched), and ``none+thrash`` follows the last sample with one byte read every 2 MB of a 16 GB buffer
(8192 pages' translations, 0.25 MB of L2). If the flushed conditions' extra time is translation misses,
the touch takes it back and the thrash adds it to the back-to-back replay.

Then the empty kernel itself is timed after a memset and back to back (``empty``: the launch shape
alone), and an empty kernel of the same grid and block without clusters or shared memory (``bare``).

None of this is timed: each sample is one event pair around the execution only.

With ``--stream``, the replicas of elementwise_f32's kernel from ``ab_stream.py`` (its ``vec2`` and
the L2 eviction-priority variants) and a few more cache-operator variants are timed under the same
conditions instead: whether a kernel can leave the memset's dirty lines alone (evict-first lines of
its own being the victims) rather than writing them back while it runs.

    python3 benchmarks/flush_probe.py benchmarks/attention_f16.yaml [...] [--rounds 3]
    python3 benchmarks/flush_probe.py --stream [--rounds 3]

Writes ``$OUT/flush_probe.md`` when OUT is set. Exit status 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from raw_gpu import emit, open_gpu  # noqa: E402

CONDITIONS = ("memset", "read", "memset+inputs", "read+inputs", "none", "memset+pre")
TLB_CONDITIONS = ("memset", "memset+touch", "read", "read+touch", "none", "none+thrash")
TOUCH_SOURCE = r"""
extern "C" __global__ void touch(const unsigned char* p, unsigned long long n, unsigned long long stride,
                                 unsigned* sink) {
    const unsigned long long i = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) * stride;
    if (i < n) {
        const unsigned v = *(const volatile unsigned char*)(p + i);
        if (v == 0x1234567u) *sink = v;  // never: keeps the load
    }
}
"""
EMPTY_CONDITIONS = ("memset", "none")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--stream", action="store_true", help="time ab_stream.py's replicas instead of specs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=150, help="samples a condition and round")
    ap.add_argument("--tlb", action="store_true", help="the translation conditions instead (see above)")
    args = ap.parse_args(argv)
    if not args.specs and not args.stream:
        ap.error("name one or more specs, or --stream")
    gpu = open_gpu("flush_probe")
    if gpu is None:
        return 2
    cp, name, _, _ = gpu

    from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings
    from cuvil_dsl.driver import make_executor, open_spec
    from cuvil_dsl.reference import HostHooks

    class Clock(CudaClock):
        condition = "memset"
        inputs: list = []
        pre = None
        arena = None  # (pointer, bytes) of the executor's arena, for ``+touch``

        def touch(self, stream, ptr: int, nbytes: int, stride: int) -> None:
            import numpy as np

            count = -(-nbytes // stride)
            touch_kernel((-(-count // 256),), (256,), (ptr, np.uint64(nbytes), np.uint64(stride), sink),
                         stream=stream)

        def flush(self, stream) -> None:
            kind = self.condition
            if kind.startswith("memset"):
                super().flush(stream)
            elif kind.startswith("read"):
                with stream:
                    self._flush.view(cp.int32).sum()
            if kind.endswith("+pre"):
                self.pre(stream)
            if kind.endswith("+touch"):
                self.touch(stream, *self.arena, 1 << 16)
            if kind.endswith("+thrash"):
                self.touch(stream, thrash.data.ptr, thrash.nbytes, 1 << 21)
            if kind.endswith("+inputs"):
                with stream:
                    for a in self.inputs:
                        a.view(cp.uint8).sum(dtype=cp.int64)

    if args.tlb:  # only the translation conditions touch memory (Clock.touch)
        touch_kernel = cp.RawModule(code=TOUCH_SOURCE).get_function("touch")
        sink = cp.zeros(1, dtype=cp.uint32)
        thrash = cp.empty(16 << 30, dtype=cp.uint8)
    conditions = TLB_CONDITIONS if args.tlb else CONDITIONS
    clock = Clock()
    if args.stream:
        return stream_variants(cp, name, clock, args)
    timer = GpuTimer(clock, Settings(budget_s=1.0, min_samples=args.samples, max_samples=args.samples,
                                     warmup_s=0.002, e2e_samples=0))
    lines = [f"# flush_probe on {name}", "",
             f"CUDA events around each execution only; {args.samples} samples a condition and round, "
             f"{args.rounds} interleaved rounds; flush buffer {clock.flush_bytes / 1e6:.0f} MB.", "",
             "| spec | " + " | ".join(conditions) + " | empty: " + " / ".join(EMPTY_CONDITIONS)
             + " | bare: " + " / ".join(EMPTY_CONDITIONS) + " |", "|---|" + "---|" * (len(conditions) + 2)]
    for spec in args.specs:
        session = open_spec(spec, backend="cuda")
        executor = make_executor(session)
        try:
            executor.run(session.inputs, session.binding.params, HostHooks())
            clock.inputs = [executor.arena.view(p.name) for p in session.pipeline.tensor_params
                            if p.name in session.inputs]
            empty, bare = empty_kernels(cp, executor._loaded[next(iter(executor._loaded))])
            clock.pre = empty
            clock.arena = (executor.arena._bytes.data.ptr, executor.arena._bytes.nbytes)
            medians: dict[str, list[float]] = {c: [] for c in conditions}
            for kernel, label in ((empty, "empty"), (bare, "bare")):
                for condition in EMPTY_CONDITIONS:
                    medians[f"{label} {condition}"] = []
            for r in range(args.rounds):
                order = conditions[r % len(conditions):] + conditions[:r % len(conditions)]
                for condition in order:
                    clock.condition = condition
                    m = timer.measure(lambda: executor.execute(None), executor.stream)
                    medians[condition].append(m.median_us)
                    print(f"{Path(spec).stem} round {r + 1} {condition}: {m.median_us:.1f} us", flush=True)
                for kernel, label in ((empty, "empty"), (bare, "bare")):
                    for condition in EMPTY_CONDITIONS:
                        clock.condition = condition
                        m = timer.measure(lambda: kernel(executor.stream), executor.stream)
                        medians[f"{label} {condition}"].append(m.median_us)
            cells = [f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" for v in medians.values()]
            lines.append(f"| {Path(spec).stem} | " + " | ".join(cells[:len(conditions)]) + " | "
                         + " / ".join(cells[len(conditions):len(conditions) + 2]) + " | "
                         + " / ".join(cells[len(conditions) + 2:]) + " |")
        finally:
            executor.close()
    lines += ["", "Cells: median of the rounds' medians (range over the rounds), us."]
    emit("\n".join(lines), "flush_probe_tlb.md" if args.tlb else "flush_probe.md")
    return 0


# more cache operators on the replica's loads and stores (ab_stream.SOURCE's helpers)
STREAM_SOURCE = r"""
template <int LOADS, int STORES>  // 0 default, 1 .cs (streaming), 2 createpolicy evict_unchanged
__device__ void vec2_op(const float4* __restrict__ x, float4* __restrict__ y) {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;" : "=l"(pol));
    const int c = blockIdx.x * 256 + threadIdx.x;
    const float4 a = LOADS == 1 ? __ldcs(x + c) : LOADS == 2 ? ld_hint(x + c, pol) : x[c];
    const float4 b = LOADS == 1 ? __ldcs(x + c + 128) : LOADS == 2 ? ld_hint(x + c + 128, pol) : x[c + 128];
    if (STORES == 1) { __stcs(y + c, op4(a)); __stcs(y + c + 128, op4(b)); }
    else if (STORES == 2) { st_hint(y + c, op4(a), pol); st_hint(y + c + 128, op4(b), pol); }
    else { y[c] = op4(a); y[c + 128] = op4(b); }
}
extern "C" __global__ void __launch_bounds__(128, 1) vec2_ldcs(const float4* x, float4* y) { vec2_op<1, 0>(x, y); }
extern "C" __global__ void __launch_bounds__(128, 1) vec2_stcs(const float4* x, float4* y) { vec2_op<0, 1>(x, y); }
extern "C" __global__ void __launch_bounds__(128, 1) vec2_cs(const float4* x, float4* y) { vec2_op<1, 1>(x, y); }
extern "C" __global__ void __launch_bounds__(128, 1) vec2_ld_eu(const float4* x, float4* y) { vec2_op<2, 0>(x, y); }
extern "C" __global__ void __launch_bounds__(128, 1) vec2_st_eu(const float4* x, float4* y) { vec2_op<0, 2>(x, y); }
extern "C" __global__ void __launch_bounds__(128, 1) vec2_eu(const float4* x, float4* y) { vec2_op<2, 2>(x, y); }
"""
STREAM_KERNELS = ("vec2", "vec2_ld_ef", "vec2_st_ef", "vec2_ldst_ef", "vec2_ldcs", "vec2_stcs", "vec2_cs",
                  "vec2_ld_eu", "vec2_st_eu", "vec2_eu")
STREAM_CONDITIONS = ("memset", "read", "none")


def stream_variants(cp, name, clock, args) -> int:
    """``--stream``: the replicas under the conditions, each checked against float64 first."""
    import os

    from ab_stream import N, SOURCE

    from cuvil_dsl.bench.timing import GpuTimer, Settings

    timer = GpuTimer(clock, Settings(budget_s=1.0, min_samples=args.samples, max_samples=args.samples,
                                     warmup_s=0.002, e2e_samples=0))
    stream = cp.cuda.Stream(non_blocking=True)
    rs = cp.random.RandomState(int.from_bytes(os.urandom(4), "little"))
    x = rs.standard_normal(N, dtype=cp.float32)
    y = cp.empty_like(x)
    want = cp.maximum(x.astype(cp.float64) * 1.5 + 0.25, 0.0) * 2.0 - 0.5
    module = cp.RawModule(code=SOURCE + STREAM_SOURCE, options=("-std=c++17",))
    launch = {k: (lambda fn=module.get_function(k): fn((N // 1024,), (128,), (x, y), stream=stream))
              for k in STREAM_KERNELS}
    ok = True
    for k, fn in launch.items():
        y.fill(0)
        fn()
        stream.synchronize()
        err = float(cp.max(cp.abs(y.astype(cp.float64) - want) / (1e-6 + 1e-6 * cp.abs(want))))
        if err > 1.0:
            print(f"{k}: WRONG ({err:.3g} of the tolerance)")
            ok = False
    medians = {(k, c): [] for k in STREAM_KERNELS for c in STREAM_CONDITIONS}
    for r in range(args.rounds):
        for k in STREAM_KERNELS[r % len(STREAM_KERNELS):] + STREAM_KERNELS[:r % len(STREAM_KERNELS)]:
            for c in STREAM_CONDITIONS:
                clock.condition = c
                medians[k, c].append(timer.measure(launch[k], stream).median_us)
        print(f"round {r + 1} done", flush=True)
    lines = [f"# flush_probe --stream on {name}", "",
             f"elementwise_f32's replica and cache-operator variants (f32 2^26); CUDA events around each launch; "
             f"{args.samples} samples a kernel, condition and round, {args.rounds} interleaved rounds.", "",
             "| kernel | " + " | ".join(STREAM_CONDITIONS) + " |", "|---|" + "---|" * len(STREAM_CONDITIONS)]
    for k in STREAM_KERNELS:
        cells = [f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
                 for v in (medians[k, c] for c in STREAM_CONDITIONS)]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: median of the rounds' medians (range over the rounds), us. _ef: createpolicy evict_first; "
              "cs: `ld/st.global.cs`; _eu: createpolicy evict_unchanged; ld / st: on the loads / stores only."]
    emit("\n".join(lines), "flush_probe_stream.md")
    return 0 if ok else 1


def empty_kernels(cp, loaded):
    """Two launchers on a stream: an empty kernel with ``loaded``'s grid, block, cluster and dynamic
    shared memory, and one with its grid and block alone."""
    import re

    source = loaded.kernel.source
    found = re.search(r"__cluster_dims__\((\d+)", source)
    cluster = f"__cluster_dims__({found.group(1)}, 1, 1) " if found else ""
    module = cp.RawModule(code=f"""
extern "C" __global__ void {cluster}empty_shaped() {{}}
extern "C" __global__ void empty_bare() {{}}
""")
    shaped, plain = module.get_function("empty_shaped"), module.get_function("empty_bare")
    shared = loaded.kernel.shared_bytes
    if shared > 48 * 1024:
        shaped.max_dynamic_shared_size_bytes = shared
    grid, block = tuple(loaded.grid), tuple(loaded.kernel.block)

    def empty(stream):
        shaped(grid, block, (), shared_mem=shared, stream=stream)

    def bare(stream):
        plain(grid, block, (), stream=stream)

    return empty, bare


if __name__ == "__main__":
    sys.exit(main())
