#!/usr/bin/env python3
"""Probe: can a second grid use the multiprocessors the attention band's clusters leave empty?

The lagged cluster band (attention_f16, 45 clusters of 8 CTAs) never places a CTA on 8 of the H200's
132 multiprocessors (``cluster_placement.py``), and its last round has 34 bands for 45 clusters. If a
second kernel took the last 34 bands (990 = 22 x 45 left: every cluster one round less) on the empty
multiprocessors while the clusters run, the launch would end a round (about 4 us) earlier. The second
kernel must start only after every cluster is placed (else its CTAs take slots the clusters need, and
the clusters left over run as a second wave): programmatic dependent launch, the band kernel calling
``griddepcontrol.launch_dependents`` first thing and the filler launched with
``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``.

This times (``GpuTimer``, L2 flushed, median), with a *spinning* filler in place of the real one (its
CTAs note their multiprocessor and spin for a set time, with about a cluster CTA's shared memory):

* the band kernel as the library renders it, and with the trigger added (same time expected);
* the band kernel walking 990 bands instead of 1024 (results wrong for the last 34: a probe);
* that plus the filler (24 or 44 CTAs spinning 60-90 us) launched dependent, and not dependent;
* the whole band kernel plus a dependent filler (does the filler disturb the clusters?).

If "990 + dependent filler" measures about the "990" time while the filler's CTAs spin on the empty
multiprocessors, a real filler (an existing single-CTA band engine given the last bands) is worth
building; if the filler waits for the clusters or slows them, it is not.

    python3 benchmarks/pdl_filler.py   # writes $OUT/pdl_filler.md when OUT is set

Measured (H200, 2026-11-30, `benchmarks/results/2026-11-30-h200-pdl_filler-session11.md`): the library
kernel 103.6-105.3 us, with the trigger 103.6-104.8; 990 bands 101.0-101.7; 990 bands with 24 dependent
CTAs spinning 80 or 90 us 101.0-102.1 (the 24 ran at once on 8 multiprocessors, 3 each: the empty ones);
44 CTAs 165.4 (20 of them waited for the clusters); all bands with 24 spinning 60 us 104.0-104.2; the
mechanism alone (8 triggering CTAs spinning 50 us, 24 dependent ones spinning 50 us) 54.5 against 105.7
not dependent. So a filler of up to 24 CTAs (64 KiB each) runs for free beside the clusters, and the
band kernel is about 2 us faster with 34 bands fewer: a filler that does those 34 bands within about
90 us (an existing single-CTA band engine needs about 18 SM-us a band: 34 bands on 8 SMs fit) would
take attention_f16 from about 103.5 to about 101.5 us.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import ab_attention  # noqa: E402
from raw_gpu import emit  # noqa: E402
from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings  # noqa: E402
from cuvil_dsl.runtime.clusters import LaunchConfig  # noqa: E402

TRIGGER = 'asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'
SPIN = r"""
template <bool TRIGGER>
__device__ void spin_body(long long ns, int* smid, long long* t0) {
    extern __shared__ unsigned char pad[];
    if (TRIGGER) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0) {
        long long s, now;
        unsigned id;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(s));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        smid[blockIdx.x] = (int)id;
        t0[blockIdx.x] = s;
        pad[0] = 1;
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - s < ns);
    }
    __syncthreads();
}
extern "C" __global__ void __launch_bounds__(128) spin(long long ns, int* smid, long long* t0) {
    spin_body<false>(ns, smid, t0);
}
// the mechanism alone: a primary of a few CTAs that triggers its dependents first thing
extern "C" __global__ void __launch_bounds__(128) spin_trigger(long long ns, int* smid, long long* t0) {
    spin_body<true>(ns, smid, t0);
}
"""
SPIN_SMEM = 64 * 1024


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute`` (cuda.h): the id, padding to 8 bytes, a 64-byte value union (here its first
    int, ``programmaticStreamSerializationAllowed``, and the rest)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


def patch(bands: int | None):
    """The band kernel's source with the trigger at its start, and walking ``bands`` bands (None: all)."""
    def edit(src: str) -> str:
        head = "    extern __shared__ __align__(1024) unsigned char cvl_smem[];"
        assert src.count(head) == 1, "the band kernel's first line moved"
        src = src.replace(head, "    " + TRIGGER + "\n" + head)
        if bands is not None:
            assert src.count("< 1024") == 5, "the band walk's bounds moved"
            src = src.replace("< 1024", f"< {bands}")
        return src
    return edit


def main() -> int:
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        from cuvil_dsl.runtime.device import device_arch

        arch = device_arch()
    except Exception as exc:
        print(f"pdl_filler: no GPU to run on ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    launch_ex = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    launch_ex.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    launch_ex.restype = ctypes.c_int
    timer = GpuTimer(CudaClock(), Settings(budget_s=0.03, min_samples=100, max_samples=300))
    path = ROOT / "benchmarks" / "attention_f16.yaml"
    loaded, pipeline, binding = ab_attention.load(path)
    host = ab_attention.fresh_inputs(binding, pipeline, seed=int(time.time()) & 0xFFFF)
    want, first = ab_attention.reference(pipeline, host, binding.params, 32)
    rtol, atol = loaded.spec.check.tolerances(pipeline.results[0].type.dtype, loaded.spec.target.tf32)
    kernels = {
        "library kernel": ab_attention.Built(loaded, pipeline, binding, host, True, arch, {}),
        "with the trigger": ab_attention.Built(loaded, pipeline, binding, host, True, arch,
                                               {"source_patch": patch(None)}),
        "990 bands, trigger": ab_attention.Built(loaded, pipeline, binding, host, True, arch,
                                                 {"source_patch": patch(990)}),
    }
    lines = [f"# pdl_filler on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}", ""]
    for label, built in kernels.items():
        built.run()
        got = built.results()[pipeline.results[0].name][:first]
        ok, err = ab_attention.matches(got, want[pipeline.results[0].name], rtol, atol)
        lines.append(f"- {label}: check {'ok' if ok else 'differs'} (error {err:.3g} x tolerance); "
                     + "; ".join(built.resources))
    module = cp.RawModule(code=SPIN)
    spin = module.get_function("spin")
    spin.max_dynamic_shared_size_bytes = SPIN_SMEM
    primary_spin = module.get_function("spin_trigger")
    primary_spin.max_dynamic_shared_size_bytes = SPIN_SMEM
    psmid, pt0 = cp.zeros(64, cp.int32), cp.zeros(64, cp.int64)
    smid = cp.zeros(64, cp.int32)
    t0 = cp.zeros(64, cp.int64)
    stream = cp.cuda.Stream(non_blocking=True)  # a stream of its own: PDL may not apply on the legacy one
    stream.use()

    def filler(ctas: int, ns: int, dependent: bool):
        args = [ctypes.c_longlong(ns), ctypes.c_void_p(smid.data.ptr), ctypes.c_void_p(t0.data.ptr)]
        params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        attr = LaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, b"", 1)
        assert ctypes.sizeof(attr) == 72 and bytes(attr)[8:12] == b"\x01\x00\x00\x00"
        config = LaunchConfig(ctas, 1, 1, 128, 1, 1, SPIN_SMEM, ctypes.c_void_p(stream.ptr),
                              ctypes.cast(ctypes.pointer(attr), ctypes.c_void_p) if dependent else None,
                              1 if dependent else 0)
        keep = (args, params, attr, config)

        def go():
            rc = launch_ex(ctypes.byref(config), ctypes.c_void_p(spin.kernel.ptr), params, None)
            if rc:
                raise RuntimeError(f"cuLaunchKernelEx: CUresult {rc}")
            return keep
        return go

    class SpinPrimary:  # stands for a band kernel in the runs below: 8 CTAs spinning 50 us, triggering first
        resources = []

        @staticmethod
        def run(only_timed=False):
            primary_spin((8,), (128,), (cp.int64(50_000), psmid, pt0), stream=stream, shared_mem=SPIN_SMEM)

    kernels["spin primary"] = SpinPrimary
    runs = [("8 CTAs spinning 50 us (trigger) + 24 CTAs spinning 50 us, dependent", "spin primary",
             (24, 50_000, True)),
            ("8 CTAs spinning 50 us (trigger) + 24 CTAs spinning 50 us, not dependent", "spin primary",
             (24, 50_000, False)),
            ("library kernel", "library kernel", None), ("with the trigger", "with the trigger", None),
            ("990 bands", "990 bands, trigger", None),
            ("990 bands + 24 CTAs spinning 80 us, dependent", "990 bands, trigger", (24, 80_000, True)),
            ("990 bands + 44 CTAs spinning 80 us, dependent", "990 bands, trigger", (44, 80_000, True)),
            ("990 bands + 24 CTAs spinning 90 us, dependent", "990 bands, trigger", (24, 90_000, True)),
            ("990 bands + 24 CTAs spinning 80 us, not dependent", "990 bands, trigger", (24, 80_000, False)),
            ("all bands + 24 CTAs spinning 60 us, dependent", "with the trigger", (24, 60_000, True)),
            ("the library kernel again", "library kernel", None)]
    lines += ["", "| launch | us (3 rounds) | filler CTAs' SMs (distinct) | filler start spread us |", "|---|---|---|---|"]
    results = {label: [] for label, _k, _f in runs}
    spots = {}
    for _round in range(3):
        for label, key, fill in runs:
            built = kernels[key]
            extra = filler(*fill) if fill else None

            def both(built=built, extra=extra):
                built.run(only_timed=True)
                if extra is not None:
                    extra()
            both()
            cp.cuda.runtime.deviceSynchronize()
            results[label].append(timer.measure(both, stream).median_us)
            if fill:
                ids, starts = cp.asnumpy(smid[:fill[0]]), cp.asnumpy(t0[:fill[0]])
                spots[label] = (len(set(ids.tolist())), (starts.max() - starts.min()) / 1e3)
        print(f"round {_round + 1} done", flush=True)
    for label, _k, fill in runs:
        us = " / ".join(f"{t:.1f}" for t in results[label])
        where = spots.get(label)
        lines.append(f"| {label} | {us} | {where[0] if where else '-'} | {f'{where[1]:.1f}' if where else '-'} |")
    emit("\n".join(lines) + "\n", "pdl_filler.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
