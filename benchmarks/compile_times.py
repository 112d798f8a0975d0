"""Compile-service timings of issue 7: cold serial vs parallel, a warm disk cache in a new
process, and an in-process hit.

    python3 benchmarks/compile_times.py [--arch sm_90] [--workers 16]

1. Every kernel of every example spec (``specs/*.yaml``, rendered for ``--arch``), compiled cold
   (a new, empty cache folder each time) on 1 worker, then on ``--workers``: wall clock of
   ``compile_units``, and the ratio. The serial run also gives each unit's compile time (from
   the compile log): the longest are listed, and a list schedule of those times on
   ``--workers`` workers is simulated in input order and in the order the service starts them
   (longest expected first; on an empty cache that is its estimate from the source), which
   shows how much of the parallel time the scheduling, rather than the machine, explains.
2. A new process with that (now warm) disk cache: ``compile_units`` for one example pipeline's
   kernels, timed inside the child after its imports (what loading a pipeline's binaries costs).
3. In the same process, the same pipeline again: the in-process hit.

Prints a markdown table and writes ``$OUT/compile_times.md`` when OUT is set. Needs NVRTC, not a
GPU. Targets (issue 7): parallel >= 3x faster than serial on 16 cores; warm disk load <= 5 ms;
in-process hit <= 50 us.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import sys, time, json
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from cuvil_dsl.compile import CompileUnit, compile_units, nvrtc
from cuvil_dsl.stages import build
b = build(sys.argv[2], sys.argv[3])
units = [CompileUnit(k.name, k.source, (k.entry,), tuple(k.options)) for k in b.rendered]
s = time.perf_counter()
nvrtc.version()  # loads CuPy's NVRTC binding (and CuPy): a GPU run has done so before it loads binaries
init_ms = (time.perf_counter() - s) * 1e3
t0 = time.perf_counter()
first = compile_units(units, b.arch, workers=1)
t1 = time.perf_counter()
hits = []
for _ in range(200):
    s = time.perf_counter()
    compile_units(units, b.arch, workers=1)
    hits.append(time.perf_counter() - s)
hits.sort()
print(json.dumps({"init_ms": init_ms, "disk_ms": (t1 - t0) * 1e3, "hit_us": hits[len(hits) // 2] * 1e6, "units": len(units),
                  "cache": sorted({getattr(u, "cache", "?") for u in first})}))
"""


def all_units(arch: str):
    from cuvil_dsl.compile import CompileUnit
    from cuvil_dsl.stages import build

    units = []
    for spec in sorted((ROOT / "specs").glob("*.yaml")):
        b = build(spec, arch)
        units += [CompileUnit(f"{spec.stem}_{k.name}", k.source, (k.entry,), tuple(k.options)) for k in b.rendered]
    return units


def cold(arch: str, workers: int) -> tuple[float, int, list]:
    """Seconds to compile every example kernel in a new process with an empty cache folder
    (a new process, so no in-memory cache helps either), how many units that was, and
    [name, milliseconds, estimated milliseconds] per unit in input order."""
    import json

    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "CUVIL_CACHE_DIR": folder}
        done = subprocess.run([sys.executable, __file__, "--child-cold", str(workers), "--arch", arch], env=env,
                              check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["units"], result["per_unit"]


def child_cold(arch: str, workers: int) -> None:
    import json

    from cuvil_dsl.compile import capture, compile_units
    from cuvil_dsl.compile.units import estimated_compile_ms

    units = all_units(arch)
    with capture() as records:
        start = time.perf_counter()
        compile_units(units, arch, workers=workers)
        seconds = time.perf_counter() - start
    took = {r["unit"]: r["duration_ms"] for r in records}
    print(json.dumps({"seconds": seconds, "units": len(units),
                      "per_unit": [[u.name, took.get(u.name, 0.0), estimated_compile_ms(u.source)] for u in units]}))


def makespan(times_ms: list[float], workers: int) -> float:
    """Milliseconds until the last of ``times_ms`` ends when each starts, in list order, on the first free worker."""
    import heapq

    free = [0.0] * max(1, workers)
    for ms in times_ms:
        heapq.heappush(free, heapq.heappop(free) + ms)
    return max(free)


def schedule_rows(per_unit: list, workers: int) -> list[str]:
    """Table rows: the serial per-unit times scheduled on ``workers`` workers, input order vs longest first."""
    total = sum(ms for _, ms, _ in per_unit)
    given = makespan([ms for _, ms, _ in per_unit], workers)
    estimated = makespan([ms for _, ms, _ in sorted(per_unit, key=lambda row: -row[2])], workers)
    best = makespan(sorted((ms for _, ms, _ in per_unit), reverse=True), workers)
    return [f"| simulated, {workers} workers, per-unit serial times: input order | {given / 1e3:.2f} s "
            f"({total / given:.2f}x) | |",
            f"| the same, longest estimated first (what the service does cold) | {estimated / 1e3:.2f} s "
            f"({total / estimated:.2f}x) | |",
            f"| the same, longest measured first (what it does with recorded times) | {best / 1e3:.2f} s "
            f"({total / best:.2f}x) | |"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--spec", default="specs/multi_pipeline.yaml", help="the pipeline loaded in steps 2 and 3")
    parser.add_argument("--child-cold", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import json

    if args.child_cold:
        child_cold(args.arch, args.child_cold)
        return 0
    serial, count, per_unit = cold(args.arch, 1)
    parallel, _, _ = cold(args.arch, args.workers)
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "CUVIL_CACHE_DIR": folder}
        # fill the disk cache in one process, then time a fresh process against it
        subprocess.run([sys.executable, "-c", CHILD, str(ROOT), args.spec, args.arch], env=env, check=True,
                       capture_output=True)
        runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, str(ROOT), args.spec, args.arch], env=env,
                                          check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
                for _ in range(5)]
    disk = statistics.median(r["disk_ms"] for r in runs)
    hit = statistics.median(r["hit_us"] for r in runs)
    init = statistics.median(r["init_ms"] for r in runs)
    lines = [f"# Compile service timings ({args.arch}, {os.cpu_count()} CPUs)", "",
             "| measurement | value | target |", "|---|---|---|",
             f"| all example kernels ({count} units), cold, 1 worker | {serial:.2f} s | |",
             f"| the same, cold, {args.workers} workers | {parallel:.2f} s | |",
             f"| serial / parallel | {serial / parallel:.2f}x | >= 3x |",
             *schedule_rows(per_unit, args.workers),
             f"| new process: loading CuPy's NVRTC binding (done by any GPU run first) | {init:.1f} ms | |",
             f"| new process, warm disk cache: `{args.spec}` ({runs[0]['units']} units) | {disk:.2f} ms (median of 5) | <= 5 ms |",
             f"| same process again (in-process hit) | {hit:.1f} us (median of 200) | <= 50 us |"]
    longest = sorted(per_unit, key=lambda row: -row[1])[:8]
    lines += ["", "Longest units, compiled alone (the serial run):", "",
              "| unit | ms | estimated ms |", "|---|---|---|",
              *[f"| {name} | {ms:.0f} | {guess:.0f} |" for name, ms, guess in longest]]
    report = "\n".join(lines) + "\n"
    print(report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "compile_times.md").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
