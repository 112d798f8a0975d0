#!/usr/bin/env python3
"""Does the attention kernel's "skip" (key tiles a mask hides, left out) finish, and with the same bits?

Each variant runs in a process of its own (a kernel that traps or faults poisons its CUDA context): the causal
pipeline of ``benchmarks/shapes/pipelines.cuvil`` (``attention_full_f16_causal``) at the shapes given, rendered
with ``ATTENTION_TUNING`` {"skip": False} ("off"), {"skip": True} ("on"), the skipping loop with a vote that is
always false ("never": the loop's control flow and barrier, no tile skipped), "on" with the barrier wait's
timeout trap removed ("notrap": a deadlock then shows as a timeout instead of a launch failure), and "on" with
each wait that times out reporting what it waited for ("diag": the first after about 40 ms, then every other
wait stuck for 2.4 ms, print block, thread, barrier and parity, and give up, so the launch ends). Each prints
whether it matched the float64 reference (first 2 batch entries), its median back-to-back time over RUNS calls
(CUDA events, no L2 flush: a first look, not the bench's method) and its resources; then whether "on" gave the
same bits as "off" for each shape; last a verdict line: the variants that finished, matched and gave off's bits
at every shape (``verdict: on never``; ``verdict: none`` when none did). The hangs came now and then,
so a variant is launched RUNS times (``--runs``, default 200) after its first checked run, and its results read
back after the last of them are compared with "off" as well.

    python3 benchmarks/skip_probe.py [B,M,N,GROUPS ...] [--variants off,on,never,notrap] [--runs 200]

GROUPS: consumer warpgroups (a number, or auto), or pN:G for a persistent grid of N blocks with G.

Session 24 wrote it to find why the first build deadlocked (benchmarks/NOTES.md, attention_full_f16). Exit
status 2 without a GPU.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

from raw_gpu import open_gpu  # noqa: E402
# "diag": the first wait of a launch to pass about 2^26 cycles (40 ms) prints its block, thread, barrier (a shared
# address) and parity, marks the launch as hung, and returns; every other wait then stuck for 2^22 cycles does the
# same, so the kernel ends (with wrong results) and the lines name each warp that was waiting, and on what
DIAG_HELPER = r'''
__device__ volatile int cvl_diag_hung;
__device__ __noinline__ bool cvl_diag_timeout(long long waited, unsigned bar, unsigned parity) {
    if (waited < (1ll << 22) || (waited < (1ll << 26) && !cvl_diag_hung)) return false;
    cvl_diag_hung = 1;
    if (threadIdx.x % 32 == 0)
        printf("cvl_hang block %d thread %d bar %u parity %u waited %lld\n", blockIdx.x, threadIdx.x, bar, parity, waited);
    return true;
}
'''
CHILD = r'''
import json, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, "benchmarks")
from cuvil_dsl.codegen import cuda_attention, cuda_wgmma
variant, B, M, N, groups, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
runs = int(sys.argv[7])
tune = {"skip": variant != "off"}
if groups.startswith("p"):
    tune["persistent"], groups = int(groups[1:].split(":")[0]), groups.split(":")[1] if ":" in groups else "auto"
if groups != "auto":
    tune["groups"] = int(groups)
if variant == "never":
    orig = cuda_attention._WsAttention.skip_vote
    cuda_attention._WsAttention.skip_vote = lambda self, t: [l.replace("bool ok = !cvl_any;", "bool ok = false;")
                                                             for l in orig(self, t)]
if variant == "notrap":
    cuda_wgmma.WS_HELPERS_OUTLINED_TRAP = cuda_wgmma.WS_HELPERS_OUTLINED_TRAP.replace("cvl_hang();", "{}")
if variant == "diag":  # "on", a wait that times out reports itself and gives up (see the module's docstring)
    cuda_wgmma.WS_HELPERS_OUTLINED_TRAP = cuda_wgmma.WS_HELPERS_OUTLINED_TRAP.replace(
        "__device__ __noinline__ void cvl_hang() { __trap(); }", DIAG_HELPER).replace(
        "if (!done && clock64() - t0 > (1ll << 31)) cvl_hang();",
        "if (!done && cvl_diag_timeout(clock64() - t0, bar, parity)) return;")
import cupy
from ab_attention import fresh_inputs, load, reference
from ab_attention_full import Built, check
from cuvil_dsl.runtime.device import device_arch
Path(work, "p.cuvil").write_text(open("benchmarks/shapes/pipelines.cuvil").read())
Path(work, "s.yaml").write_text(f"pipeline: p.cuvil\nentry: attention_full_f16_causal\nshapes: {{B: {B}, M: {M}, N: {N}, D: 64}}\n"
                                "inputs:\n  qpos: {init: arange}\n  kpos: {init: arange}\ncheck: {rtol: 4.0e-3, atol: 4.0e-3}\n")
loaded, pipeline, binding = load(Path(work, "s.yaml"))
host = fresh_inputs(binding, pipeline, seed=1)
want, first = reference(pipeline, host, binding.params, B)
b = Built(loaded, pipeline, binding, host, device_arch(), None, tune)
b.run()
ok, worst = check(b, want, first, 4e-3, 4e-3)
first_bits = b.results()["o"]
ts = []
for _ in range(runs):
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    e0.record(); b.run(); e1.record(); e1.synchronize()
    ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1000)
last_bits = b.results()["o"]
steady = bool(np.array_equal(first_bits.view(np.uint16), last_bits.view(np.uint16)))
np.save(str(Path(work, f"{variant}-{B}-{M}-{N}-{sys.argv[5]}.npy")), last_bits)
print(json.dumps({"ok": bool(ok) and steady, "worst": round(worst, 3), "steady": steady, "runs": runs + 1,
                  "us": round(sorted(ts)[len(ts) // 2], 1), "res": b.resources}))
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="*", default=["2,320,700,1", "32,2048,2048,auto"])
    ap.add_argument("--variants", default="off,on")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a variant (compile, reference, run)")
    ap.add_argument("--runs", type=int, default=200, help="timed launches a variant after its checked one")
    args = ap.parse_args(argv)
    if open_gpu("skip_probe") is None:
        return 2
    import numpy as np

    work = tempfile.mkdtemp(prefix="skip_probe")
    variants = args.variants.split(",")
    good = {v: True for v in variants}  # finished, matched and steady at every shape so far
    for shape in args.shapes:
        B, M, N, groups = shape.split(",")
        for variant in variants:
            try:
                r = subprocess.run([sys.executable, "-c", f"DIAG_HELPER = {DIAG_HELPER!r}\n{CHILD}", variant, B, M, N,
                                    groups, work, str(args.runs)],
                                   cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
                out = (r.stdout.strip().splitlines() or [""])[-1]
                hung = [line for line in r.stdout.splitlines() if line.startswith("cvl_hang")]
                if hung:  # "diag": the waits that gave up, the first 40 of them
                    print(f"{variant} [{B}, {M}, {N}] groups {groups}: {len(hung)} waits gave up:", *hung[:40], sep="\n  ")
                err = "" if r.returncode == 0 else " | ".join(x for x in r.stderr.splitlines() if "Error" in x)[:300]
            except subprocess.TimeoutExpired:
                out, err = "", "TIMEOUT"
            good[variant] = good[variant] and not err and '"ok": true' in out
            print(f"{variant:7} [{B}, {M}, {N}] groups {groups}: {out} {err}", flush=True)
    for f in sorted(glob.glob(os.path.join(work, "*.npy"))):
        variant, case = os.path.basename(f)[:-4].split("-", 1)
        off = os.path.join(work, f"off-{case}.npy")
        if variant != "off" and os.path.exists(off):
            same = np.array_equal(np.load(f).view(np.uint16), np.load(off).view(np.uint16))
            good[variant] = good[variant] and same
            print(f"{case}: {variant} gives the same bits as off: {same}")
    passed = [v for v in variants if v != "off" and good[v] and good.get("off", True)]
    print("verdict:", " ".join(passed) or "none", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
