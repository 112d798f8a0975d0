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

This times (``GpuTimer``, L2 flushed, median):

* the band kernel as the library renders it, and with the trigger added (same time expected);
* the band kernel walking 990 bands instead of 1024 (results wrong for the last 34: a probe);
* that plus a *spinning* filler (24 or 44 CTAs noting their multiprocessor and spinning 60-90 us, with
  about a cluster CTA's shared memory), launched dependent and not dependent;
* that plus a *real* filler: the library's two-pass band engines (wgmma and mma.sync, 128 rows a CTA)
  with a band offset, walking the last 34 bands (17 CTAs), checked against float64 on that tail
  first; and each real filler alone;
* the whole band kernel plus a dependent spinning filler (does the filler disturb the clusters?).

    python3 benchmarks/pdl_filler.py   # writes $OUT/pdl_filler.md when OUT is set

Exit status: 0 when every kernel's check passed (the band kernels on the first batches, the fillers on
the tail, leaving the rest untouched), 1 when one did not, 2 without a GPU.

Measured (H200, 2026-11-30, `benchmarks/results/2026-11-30-h200-pdl_filler-session11.md`, two calls):
the library kernel 103.6-105.3 us; 990 bands 101.0-102.6; 990 bands with 24 dependent CTAs spinning 80
or 90 us 101.0-103.5 (the 24 ran at once on the 8 empty multiprocessors, 3 each, and cost the clusters
nothing); 44 such CTAs 165.4 (20 waited for the clusters). But the real fillers, correct on the tail,
made it slower: with the wgmma band 109.7-110.3, with the mma.sync band 118.4-118.6 (alone, on an idle
GPU, they take 48.8-49.4 and 69.2-70.4 us: one CTA a multiprocessor; on 8 multiprocessors their 17 CTAs
share, and the wgmma band's registers allow 2 a multiprocessor, so one waits). A filler pays only if the
tail's bands fit the 8 multiprocessors within about 90 us, which these engines' CTAs, 49 us each alone,
do not.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

import numpy as np

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


# A real filler: a single-CTA band engine (cuda_matmul's two-pass bands, 128 rows a CTA, grid 512 for
# attention_f16) walking only the last bands: its CTA b takes band OFFSET + b, launched with the tail's CTAs.
TAIL_FROM = 495  # 128-row bands: 990 64-row bands = 495 of them; the tail is 17
ENGINES = {"wgmma band (two-pass, 256 threads)": {"wgmma": (64, 4, 2)},
           "mma.sync band (two-pass, 128 threads)": {"mma": True}}


def offset_patch(offset: int):
    """A two-pass band kernel's source whose CTA b computes 128-row band ``offset + b``."""
    def edit(src: str) -> str:
        for old in ("const int mt = blockIdx.x % 16;", "const int bz = blockIdx.x / 16;"):
            assert src.count(old) == 1, "the band engine's band index moved"
            src = src.replace(old, old.replace("blockIdx.x", f"((int)blockIdx.x + {offset})"))
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
    checked = []
    for label, built in kernels.items():
        built.run()
        got = built.results()[pipeline.results[0].name][:first]
        ok, err = ab_attention.matches(got, want[pipeline.results[0].name], rtol, atol)
        checked.append(ok)
        lines.append(f"- {label}: check {'ok' if ok else 'differs'} (error {err:.3g} x tolerance); "
                     + "; ".join(built.resources))
    # the real fillers, checked on the tail they compute (batches 30 and 31: their own float64 reference)
    tail_host = {n: (a[30:32] if a.ndim == 3 and a.shape[0] == 32 else a) for n, a in host.items()}
    want_tail, _ = ab_attention.reference(pipeline, tail_host, binding.params, 2)
    name = pipeline.results[0].name
    engines = {}
    for label, tuning in ENGINES.items():
        built = ab_attention.Built(loaded, pipeline, binding, host, True, arch,
                                   {**tuning, "source_patch": offset_patch(TAIL_FROM)})
        (lk, _timed), = built.launches
        engines[label] = (built, lk)
        built.repoison()
        launch_tail(lk, 512 - TAIL_FROM, cp.cuda.get_current_stream().ptr, launch_ex, dependent=False)
        got = built.results()[name]
        # 128-row band 495 is batch 30, rows 1920..2047; bands 496..511 are batch 31
        ok1, e1 = ab_attention.matches(got[30:31, 1920:], want_tail[name][0:1, 1920:], rtol, atol)
        ok2, e2 = ab_attention.matches(got[31:32], want_tail[name][1:2], rtol, atol)
        untouched = bool(np.isnan(got[:30].astype(np.float32)).all() and np.isnan(got[30, :1920].astype(np.float32)).all())
        checked.append(ok1 and ok2 and untouched)
        lines.append(f"- filler {label}, bands {TAIL_FROM}..511 only: tail check {'ok' if ok1 and ok2 else 'differs'} "
                     f"(error {max(e1, e2):.3g} x tolerance), rows before the tail untouched: {untouched}; "
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

    def engine_filler(label: str, dependent: bool):
        lk = engines[label][1]
        return lambda: launch_tail(lk, 512 - TAIL_FROM, stream.ptr, launch_ex, dependent)
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
            *((f"990 bands + {label} on the last 34, dependent", "990 bands, trigger", (label, True))
              for label in ENGINES),
            *((f"990 bands + {label} on the last 34, not dependent", "990 bands, trigger", (label, False))
              for label in ENGINES),
            *((f"{label} on the last 34 alone", None, (label, False)) for label in ENGINES),
            ("the library kernel again", "library kernel", None)]
    lines += ["", "| launch | us (3 rounds) | filler CTAs' SMs (distinct) | filler start spread us |", "|---|---|---|---|"]
    results = {label: [] for label, _k, _f in runs}
    spots = {}
    for _round in range(3):
        for label, key, fill in runs:
            built = kernels[key] if key else None
            extra = (engine_filler(*fill) if fill and fill[0] in ENGINES else filler(*fill)) if fill else None

            def both(built=built, extra=extra):
                if built is not None:
                    built.run(only_timed=True)
                if extra is not None:
                    extra()
            both()
            cp.cuda.runtime.deviceSynchronize()
            results[label].append(timer.measure(both, stream).median_us)
            if fill and fill[0] not in ENGINES:
                ids, starts = cp.asnumpy(smid[:fill[0]]), cp.asnumpy(t0[:fill[0]])
                spots[label] = (len(set(ids.tolist())), (starts.max() - starts.min()) / 1e3)
        print(f"round {_round + 1} done", flush=True)
    for label, _k, fill in runs:
        us = " / ".join(f"{t:.1f}" for t in results[label])
        where = spots.get(label)
        lines.append(f"| {label} | {us} | {where[0] if where else '-'} | {f'{where[1]:.1f}' if where else '-'} |")
    emit("\n".join(lines) + "\n", "pdl_filler.md")
    return 0 if all(checked) else 1


def launch_tail(lk, ctas: int, stream_ptr: int, launch_ex, dependent: bool) -> None:
    """Launch loaded kernel ``lk`` (its parameter array, block and shared memory) on ``ctas`` CTAs through
    ``cuLaunchKernelEx``, as a programmatic dependent of the stream's previous kernel when ``dependent``."""
    attr = LaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, b"", 1)
    config = LaunchConfig(ctas, 1, 1, *lk.kernel.block, lk.kernel.shared_bytes, ctypes.c_void_p(stream_ptr),
                          ctypes.cast(ctypes.pointer(attr), ctypes.c_void_p) if dependent else None,
                          1 if dependent else 0)
    params = ctypes.cast(lk.parameter_array, ctypes.POINTER(ctypes.c_void_p))
    rc = launch_ex(ctypes.byref(config), ctypes.c_void_p(lk.function_handle), params, None)
    if rc:
        raise RuntimeError(f"cuLaunchKernelEx: CUresult {rc}")


if __name__ == "__main__":
    raise SystemExit(main())
