#!/usr/bin/env python3
"""Where the GPU puts the CTAs of a cluster kernel: how many multiprocessors hold 0, 1, 2, ... CTAs.

A probe kernel with the resources of attention_f16's lagged band (``cuda_band_cluster``: clusters of 8
CTAs of 128 threads, 67584 bytes of dynamic and 6144 of static shared memory, so 3 CTAs a
multiprocessor; ``tests/bench/test_cluster_placement.py`` keeps these defaults equal to the rendered
kernel's) records ``%smid`` and ``%globaltimer`` in every CTA and spins long enough that every CTA
that can run at once does. For each grid (in clusters) it reports the CTAs of the first wave and the
multiprocessors by the CTAs they hold.

    python3 benchmarks/cluster_placement.py [--clusters 44 45 46 33] [--sizes 8 16 4] [--policies default balance]
    # $OUT/cluster_placement.md when OUT is set

``--sizes``: cluster sizes to probe (16 is non-portable: the kernel allows it by its attribute); for a
size other than 8 the grids are the cluster counts from 85% of what 3 CTAs a multiprocessor would hold
to one past it. ``--policies``: the cluster scheduling policy asked of the driver
(``CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE``: default, spread, or balance for load
balancing).

Measured on the H200 (2026-11-30, session 9): at 44 clusters 104 multiprocessors hold 3 CTAs, 20 hold 2
and 8 hold none; the same 8 stay empty at 33 and 45 clusters (46 do not run at once) under every policy.
16-CTA clusters leave 16 empty (8 under load balancing), 4-CTA clusters 8 (none under load balancing),
2-CTA clusters none (`--sizes 8 16 4 2 --policies default spread balance`).

Exit status: 0, or 2 when there is no GPU (nothing is run).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

CLUSTER, THREADS, DYNAMIC_SHARED, STATIC_SHARED = 8, 128, 67584, 6144
PER_SM = 3  # CTAs of these resources a multiprocessor holds
POLICIES = {"default": 0, "spread": 1, "balance": 2}  # CUclusterSchedulingPolicy
NON_PORTABLE, SCHEDULING_POLICY = 14, 15  # CUfunction_attribute (cuda.h)
SPIN_CYCLES = 300_000  # about 170 us at 1.755 GHz: every CTA that fits is running before the first leaves


def source(cluster: int = CLUSTER, threads: int = THREADS, static_shared: int = STATIC_SHARED) -> str:
    """The probe: each CTA's multiprocessor and start time, after touching its shared memory."""
    return f"""
extern "C" __global__ void __cluster_dims__({cluster}, 1, 1) __launch_bounds__({threads})
probe(unsigned* sm, unsigned long long* started, long long spin) {{
    extern __shared__ unsigned char dyn[];
    __shared__ unsigned char fixed[{static_shared}];
    unsigned s;
    unsigned long long t;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    fixed[threadIdx.x] = (unsigned char)s;
    dyn[threadIdx.x] = (unsigned char)(s + 1);
    const long long c0 = clock64();
    while (clock64() - c0 < spin) {{}}
    __syncthreads();
    if (threadIdx.x == 0) {{
        sm[blockIdx.x] = s;
        started[blockIdx.x] = t;
    }}
    // keeps both shared arrays (never true)
    if (fixed[(threadIdx.x + 1) % {threads}] == 0xffu && dyn[(threadIdx.x + 3) % {threads}] == 0u) sm[0] = 0xffffffffu;
}}
"""


def placement(sms, started_ns, n_sm: int) -> tuple[int, dict[int, int]]:
    """(CTAs of the first wave, {CTAs held: multiprocessors}) from each CTA's multiprocessor and start
    time: the first wave is every CTA that started within 50 us of the first (the spin is longer)."""
    first_start = min(started_ns)
    held = collections.Counter(s for s, t in zip(sms, started_ns) if t - first_start < 50_000)
    by_count = collections.Counter(held.get(i, 0) for i in range(n_sm))
    return sum(held.values()), dict(sorted(by_count.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, nargs="+", default=[44, 45, 46, 33], help="grids of 8-CTA clusters")
    parser.add_argument("--sizes", type=int, nargs="+", default=[CLUSTER], help="cluster sizes (CTAs)")
    parser.add_argument("--policies", nargs="+", default=["default"], choices=sorted(POLICIES))
    args = parser.parse_args(argv)
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as exc:  # no CuPy, no driver, no device
        print(f"cluster_placement: no GPU to run on ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    from cupy_backends.cuda.api import driver

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    n_sm = props["multiProcessorCount"]
    lines = [f"# Placement of clusters ({name}, {n_sm} SMs, {time.strftime('%Y-%m-%d')})", "",
             f"{THREADS} threads, {DYNAMIC_SHARED} + {STATIC_SHARED} B of shared memory a CTA (attention_f16's lagged band).",
             "", "| cluster size | policy | clusters | CTAs | first wave | multiprocessors by CTAs held |",
             "|---|---|---|---|---|---|"]
    for size in args.sizes:
        kernel = cupy.RawModule(code=source(size), options=("-arch=sm_90",)).get_function("probe")
        kernel.max_dynamic_shared_size_bytes = DYNAMIC_SHARED
        function = kernel.kernel.ptr  # the CUfunction under CuPy's RawKernel
        if size > 8:
            driver.funcSetAttribute(function, NON_PORTABLE, 1)
        fits = n_sm * PER_SM // size
        grids = args.clusters if size == CLUSTER else range(int(0.85 * fits), fits + 2)
        for policy in args.policies:
            driver.funcSetAttribute(function, SCHEDULING_POLICY, POLICIES[policy])
            for clusters in grids:
                n = clusters * size
                sm = cupy.zeros(n, dtype=cupy.uint32)
                started = cupy.zeros(n, dtype=cupy.uint64)
                kernel((n,), (THREADS,), (sm, started, cupy.int64(SPIN_CYCLES)), shared_mem=DYNAMIC_SHARED)
                cupy.cuda.runtime.deviceSynchronize()
                wave, by_count = placement(sm.get().tolist(), started.get().tolist(), n_sm)
                lines.append(f"| {size} | {policy} | {clusters} | {n} | {wave} | "
                             + ", ".join(f"{c} CTAs: {m}" for c, m in by_count.items()) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["OUT"]) / "cluster_placement.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
