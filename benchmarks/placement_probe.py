#!/usr/bin/env python3
"""Does attention_f16's time depend on where its buffers lie? The same kernel, built N times.

In session 13 ``ab_attention.py`` timed the default kernel at 102.8 us first and, as "the default
again" at the end of the same run, 99.5 us (and 103.3 / 100.1 in a second run): the same code, with
its buffers allocated anew. This builds the default kernel ``--builds`` times, each with its own
fresh allocations (all kept alive, so no two share memory), and times them round-robin in
``--rounds`` rounds as ``cuvil-dsl bench`` does (``bench.timing.GpuTimer``: a memset of twice the L2
before each sample, CUDA events, median). Each build is checked against float64 first. The table
gives each build's medians and where its output P, Q and K start (the offset within a 2 MiB page,
and from the flush buffer).

    python3 benchmarks/placement_probe.py [--builds 6] [--rounds 3]   # $OUT/placement_probe.md

Exit status 2 when there is no GPU, 1 when a build's results are wrong.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from raw_gpu import emit, open_gpu  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--spacer-mb", type=int, default=0, help="allocate this many MB between builds")
    args = ap.parse_args(argv)
    gpu = open_gpu("placement_probe")
    if gpu is None:
        return 2
    cupy = gpu[0]
    import ab_attention as ab

    from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings
    from cuvil_dsl.runtime.device import device_arch

    arch = device_arch()
    clock = CudaClock()
    timer = GpuTimer(clock, Settings(budget_s=1.0, min_samples=args.samples, max_samples=args.samples))
    loaded, pipeline, binding = ab.load(ROOT / "benchmarks" / "attention_f16.yaml")
    host = ab.fresh_inputs(binding, pipeline, seed=int(time.time()) & 0xFFFF)
    want, first = ab.reference(pipeline, host, binding.params, 32)
    ab.prewarm(loaded, pipeline, binding, [(True, None, "row band")], arch)
    builds, spacers, ok = [], [], True
    for i in range(args.builds):
        if args.spacer_mb and i:
            spacers.append(cupy.empty(args.spacer_mb << 20, dtype=cupy.uint8))
        built = ab.Built(loaded, pipeline, binding, host, True, arch, None)
        built.run()
        cupy.cuda.runtime.deviceSynchronize()
        got = built.results()
        for r in pipeline.results:
            rtol, atol = loaded.spec.check.tolerances(r.type.dtype, loaded.spec.target.tf32)
            good, err = ab.matches(got[r.name][:first] if first else got[r.name], want[r.name], rtol, atol)
            if not good:
                print(f"build {i}: {r.name} wrong ({err:.3g} of the tolerance)", file=sys.stderr)
                ok = False
        builds.append(built)
    times: list[list[float]] = [[] for _ in builds]
    for r in range(args.rounds):
        for i in list(range(len(builds)))[r % len(builds):] + list(range(len(builds)))[:r % len(builds)]:
            times[i].append(builds[i].time_us(timer))
        print(f"round {r + 1}: " + ", ".join(f"{t[-1]:.1f}" for t in times), flush=True)
    flush = clock._flush.data.ptr
    names = {r.name for r in pipeline.results}
    lines = [f"# placement_probe ({time.strftime('%Y-%m-%d')})", "",
             f"attention_f16's default kernel built {args.builds} times (fresh buffers each, all alive"
             + (f", {args.spacer_mb} MB between builds" if args.spacer_mb else "") + f"), timed round-robin in "
             f"{args.rounds} rounds as the bench times (memset flush, events, median of {args.samples}).", "",
             f"Flush buffer at 0x{flush:x}.", "",
             "| build | us (median of rounds) | rounds | buffers: start (offset in 2 MiB page; from the flush buffer, MB) |",
             "|---|---|---|---|"]
    for i, (built, t) in enumerate(zip(builds, times)):
        where = "; ".join(f"{n}{' (out)' if n in names else ''} 0x{a.data.ptr:x} ({a.data.ptr % (2 << 20):#x}; "
                          f"{(a.data.ptr - flush) / 1e6:+.0f})" for n, a in built.buffers.items())
        lines.append(f"| {i} | {statistics.median(t):.1f} | {' / '.join(f'{v:.1f}' for v in t)} | {where} |")
    emit("\n".join(lines) + "\n", "placement_probe.md")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
