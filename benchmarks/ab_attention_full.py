#!/usr/bin/env python3
"""A/B of the fused attention kernel's settings on the GPU (``cuda_attention.ATTENTION_TUNING`` and the
block size): ``softmax(Q K^T * 0.125) V`` at the benchmark's shape and more.

Each variant is rendered, compiled and launched as the executor launches (argument cells), checked
against the float64 reference (the first 2 batch entries) on fresh random inputs, then timed as
``cuvil-dsl bench`` times (``bench.timing.GpuTimer``: L2 flushed and CUDA events around every sample,
the queue kept full), in ``--rounds`` interleaved rounds (the machine drifts by a few percent within a
call: only rows timed side by side compare), and checked again after the timed launches.

    python3 benchmarks/ab_attention_full.py [--samples 100] [--rounds 3]   # writes $OUT/ab_attention_full.md

Exit status: 0 when every variant matches its reference, 1 when one does not, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ab_attention import fresh_inputs, load, matches, reference  # noqa: E402

from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings  # noqa: E402

CASES = [ROOT / "benchmarks" / "attention_full_f16.yaml", ROOT / "benchmarks" / "shapes" / "attention_full_f16-d128.yaml",
         ROOT / "specs" / "attention.yaml"]  # the example: causal, a small grid
# (label, threads a block, cuda_attention.ATTENTION_TUNING)
VARIANTS = [
    ("default", None, {}),
    ("wgmma, not warp-specialised (session 21's default)", None, {"ws": False}),
    ("mma.sync, blocks of 256, fold", 256, {"wgmma": False}),
    ("wgmma, 1 warpgroup", 128, {}),
    ("wgmma, 2 warpgroups", 256, {}),
    ("wgmma, 2 warpgroups, 128-key tiles", 256, {"bn": 128}),
    ("wgmma, 1 warpgroup, overlap", 128, {"overlap": True}),
    ("wgmma, 2 warpgroups, overlap", 256, {"overlap": True}),
    ("wgmma, 2 warpgroups, overlap, 128-key tiles", 256, {"overlap": True, "bn": 128}),
    ("wgmma, 3 warpgroups, overlap", None, {"ws": False, "overlap": True, "groups": 3}),
    ("ws, 2 consumers, overlap", None, {"ws": True, "groups": 2}),
    ("ws, 2 consumers, overlap, 3 stages", None, {"ws": True, "groups": 2, "stages": 3}),
    ("ws, 2 consumers, no overlap", None, {"ws": True, "groups": 2, "overlap": False}),
    ("ws, 2 consumers, pingpong", None, {"ws": True, "groups": 2, "pingpong": True}),
    ("ws, 2 consumers, pingpong, 3 stages", None, {"ws": True, "groups": 2, "pingpong": True, "stages": 3}),
    ("ws, 2 consumers, pingpong, 176-key tiles", None, {"ws": True, "groups": 2, "pingpong": True, "bn": 176}),
    ("ws, 2 consumers, overlap, 176-key tiles", None, {"ws": True, "groups": 2, "bn": 176}),
    ("ws, 3 consumers, overlap", None, {"ws": True, "groups": 3}),
    ("ws, 3 consumers, overlap, 3 stages", None, {"ws": True, "groups": 3, "stages": 3}),
    ("ws, 3 consumers, 64-key tiles, 4 stages", None, {"ws": True, "groups": 3, "bn": 64, "stages": 4}),
    ("ws, 4 consumers, 64-key tiles", None, {"ws": True, "groups": 4, "bn": 64}),
    ("ws, 4 consumers, 64-key tiles, 4 stages", None, {"ws": True, "groups": 4, "bn": 64, "stages": 4}),
    ("ws, 1 consumer, 64-key tiles", None, {"ws": True, "groups": 1, "bn": 64}),
    ("ws, persistent", None, {"ws": True, "persistent": True}),
    ("ws, 3 consumers, 3 stages, persistent", None, {"ws": True, "groups": 3, "stages": 3, "persistent": True}),
    # Session 23: a row's tile maximum and numerator sum in independent chains ("chains": (max, sum)); ncu put
    # 30% of the two-consumer kernel's stalls on fixed-latency dependencies (FMNMX and FADD chains of 2 x bn / 8)
    ("chains: max in 2", None, {"chains": (2, 1)}),
    ("chains: max in 4", None, {"chains": (4, 1)}),
    ("chains: max and sum in 4", None, {"chains": (4, 4)}),
    ("chains: 2 consumers, max and sum in 4", None, {"ws": True, "groups": 2, "chains": (4, 4)}),
    ("chains: 2 consumers, max in 4", None, {"ws": True, "groups": 2, "chains": (4, 1)}),
    ("chains: none, 2 consumers", None, {"ws": True, "groups": 2}),
    # Session 24: a key tile the mask hides from a consumer's rows left out ("skip", off by default: correct on the
    # H100 since session 28, slower on the causal benchmark; only masked attention changes: the example and
    # --case benchmarks/shapes/attention_full_f16-causal.yaml)
    ("skip: on", None, {"skip": True}),
    ("skip: on, 2 consumers", None, {"ws": True, "groups": 2, "skip": True}),
    ("skip: off, 2 consumers", None, {"ws": True, "groups": 2}),
    # Session 29: with "skip" the blocks of rows in descending order on a grid of one block a work item (the default
    # there now), so the GPU's block scheduler runs a longest-first list schedule of a causal mask's uneven blocks;
    # session 28's "skip" numbers were of a persistent grid in ascending order
    ("skip: on, persistent, ascending", None, {"skip": True, "persistent": True, "order": "ascending"}),
    ("skip: on, 2 consumers, persistent, ascending", None,
     {"ws": True, "groups": 2, "skip": True, "persistent": True, "order": "ascending"}),
    ("skip: on, 3 consumers", None, {"ws": True, "groups": 3, "skip": True}),
    ("skip: on, 2 consumers, ascending", None, {"ws": True, "groups": 2, "skip": True, "order": "ascending"}),
    # Session 29, after its device time ran out: a mask of positions (kpos <= qpos) tested a key a lane against the
    # warp's largest row position ("separable", the default with "skip"); these test it element by element as before
    ("skip: on, element test", None, {"skip": True, "separable": False}),
    ("skip: on, 2 consumers, element test", None, {"ws": True, "groups": 2, "skip": True, "separable": False}),
    # Session 30: the block's key tiles listed before its loop ("skip": "list"): the plain loop over the tiles some row
    # of the block sees, no vote; a second pass over every tile where a skip was inexact (rows masked whole)
    ("skip: list", None, {"skip": "list"}),
    ("skip: list, 2 consumers", None, {"ws": True, "groups": 2, "skip": "list"}),
    ("skip: list, 3 consumers", None, {"ws": True, "groups": 3, "skip": "list"}),
    ("skip: list, 1 consumer", None, {"ws": True, "groups": 1, "skip": "list"}),
    ("skip: list, every tile masked", None, {"skip": "list", "bare": False}),
    ("skip: list, untrimmed", None, {"skip": "list", "trim": False}),
    ("skip: list, untrimmed, every tile masked", None, {"skip": "list", "trim": False, "bare": False}),
    ("skip: list, 2 consumers, every tile masked", None, {"ws": True, "groups": 2, "skip": "list", "bare": False}),
    # Session 31: where the causal kernel's time goes. On benchmarks/shapes/attention_full_f16-allpass.yaml (every key
    # passes) "skip: list" against "skip: off, not persistent" is what listing costs a block
    ("skip: off", None, {"skip": False}),
    ("skip: off, not persistent", None, {"skip": False, "persistent": False}),
    ("skip: list, ascending", None, {"skip": "list", "order": "ascending"}),
    ("skip: list, 3 stages", None, {"skip": "list", "stages": 3}),
    ("skip: list, 2 consumers, 64-key tiles", None, {"groups": 2, "bn": 64, "skip": "list"}),
    # Session 31: a "bare" tile computed from its raw accumulators ("fold"), and three K and V slots with "list" (both
    # the default now): these variants turn them off. (Measured and removed: "bare" judged per consumer warpgroup's
    # rows, "own": 64.1 against 63.9 us without it.)
    ("skip: list, unfolded", None, {"skip": "list", "fold": False}),
    ("skip: list, 2 stages", None, {"skip": "list", "stages": 2}),
    ("skip: list, 4 stages", None, {"skip": "list", "stages": 4}),
    ("skip: list, unfolded, 2 stages (session 30)", None, {"skip": "list", "fold": False, "stages": 2}),
    # Session 32: the overlapped loop unrolled by the slot count ("unroll": constant slots and barrier addresses, one
    # division a round; not with "list") and the warpgroup's index known uniform ("uniform": Q's descriptors in uniform
    # registers), both the default: these variants turn them off
    ("unroll: off", None, {"unroll": False}),
    ("uniform: off", None, {"uniform": False}),
    ("unroll and uniform: off (session 31)", None, {"unroll": False, "uniform": False}),
    # Session 32: the outputs rescaled only when a row of the warp has a new maximum (a warp vote; session 21 measured it
    # slower on the kernel without a producer)
    ("lazy", None, {"lazy": True}),
    # Session 33 (measured in session 34, the default since): with "list", runs of S bare tiles (folded) in rounds of
    # constant slots, the rest one by one, and the second pass (every tile, where a skip was inexact) "serial" so that
    # the rounds fit the registers. These turn them off on the causal case: the rolled list with the overlapped second
    # pass (session 32's kernel), and with the serial one
    ("list rolled (session 32)", None, {"unroll": False, "again": "overlap"}),
    ("list rolled, second pass serial", None, {"unroll": False}),
    # (Session 23, measured and removed, commit 15c36eb: "slack" S, a row keeping its exponent base while its maximum
    # passes it by at most S log2 units, the outputs rescaled only when some row's base moves: D 64 88.8 us at S 8 and
    # 89.0 at S 4 against 87.7; D 128 68.4 / 68.1 against 68.5; the example 13.3 / 13.4 against 13.2.)
]


class Built:
    """One variant of a case rendered, compiled, loaded and bound to device buffers."""

    def __init__(self, loaded, pipeline, binding, host: dict, arch: str, threads: int | None, tuning: dict):
        import cupy

        from cuvil_dsl.codegen import cuda_attention, render_cuda
        from cuvil_dsl.compile import CompileUnit, compile_units
        from cuvil_dsl.passes import plan_pipeline
        from cuvil_dsl.reference.executor import eval_op
        from cuvil_dsl.runtime.device import max_dynamic_shared_bytes
        from cuvil_dsl.runtime.modules import ArgumentCells, load_kernels
        from cuvil_dsl.types import DType, concrete_shape

        overrides = dict(loaded.spec.kernels)
        plan, _ = plan_pipeline(pipeline, overrides, arch)
        attention = next(k.name for k in plan.kernels if k.kind == "attention")
        if threads is not None:
            overrides[attention] = {"block": threads}
        plan, diags = plan_pipeline(pipeline, overrides, arch)
        assert not [d for d in diags if d.is_error], diags
        cuda_attention.ATTENTION_TUNING.clear()
        cuda_attention.ATTENTION_TUNING.update(tuning)
        try:
            rendered = render_cuda(plan, binding.sizes, arch)
        finally:
            cuda_attention.ATTENTION_TUNING.clear()
        units = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options) for k in rendered], arch)
        self.pipeline = pipeline
        self.buffers, self.dtypes = {}, {}
        for b in plan.buffers:
            self.dtypes[b.name] = b.type.dtype
            if b.role == "input":
                a = host[b.name]
                self.buffers[b.name] = cupy.asarray(a.view(np.uint16) if b.type.dtype is DType.BF16 else a)
            else:
                self.buffers[b.name] = cupy.full(concrete_shape(b.type.shape, binding.sizes), np.nan,
                                                 dtype=b.type.dtype.numpy)
        env = dict(binding.params)
        for op in plan.host_ops:
            env[op.out] = eval_op(op, env)
        self.cells = ArgumentCells()
        for name, array in self.buffers.items():
            self.cells.set_pointer(name, array.data.ptr)
        loaded_kernels = load_kernels(rendered, units, self.cells, max_dynamic_shared_bytes())
        self.cells.set_uniforms(env)
        self.launches = [loaded_kernels[k.name] for k in rendered]
        k, unit = next((k, u) for k, u in zip(rendered, units) if k.name == attention)
        r = unit.resources[k.entry]
        self.resources = (f"{r.registers} regs, {r.spill_bytes} B spilled, {k.shared_bytes} B smem, "
                          f"grid {k.grid[0]} x {k.block[0]}")

    def repoison(self) -> None:
        for r in self.pipeline.results:
            self.buffers[r.name][...] = np.nan

    def run(self) -> None:
        import cupy

        stream = cupy.cuda.get_current_stream().ptr
        for kernel in self.launches:
            kernel.launch(stream)

    def results(self) -> dict[str, np.ndarray]:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
        return {r.name: cupy.asnumpy(self.buffers[r.name]) for r in self.pipeline.results}


def check(built: Built, want: dict, first: int | None, rtol: float, atol: float) -> tuple[bool, float]:
    got = built.results()
    worst, ok = 0.0, True
    for name, w in want.items():
        g = got[name][:first] if first else got[name]
        good, err = matches(g, w, rtol, atol)
        ok, worst = ok and good, max(worst, err)
    return ok, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", metavar="TEXT", help="only the variants whose label contains TEXT")
    parser.add_argument("--label", action="append", metavar="LABEL", help="only the variants of exactly this label")
    parser.add_argument("--case", action="append", metavar="SPEC", type=Path,
                        help="time these specs instead of the default three (repeatable)")
    args = parser.parse_args(argv)
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        from cuvil_dsl.runtime.device import device_arch

        arch = device_arch()
    except Exception as exc:  # no CuPy, no driver, no device
        print(f"ab_attention_full: no GPU to run on ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    variants = [v for v in VARIANTS if (not args.only and not args.label) or any(o in v[0] for o in args.only or [])
                or v[0] in (args.label or [])]
    timer = GpuTimer(CudaClock(), Settings(budget_s=0.02, min_samples=args.samples, max_samples=max(args.samples, 200)))
    lines = [f"# ab_attention_full ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {arch})", ""]
    ok_all = True
    for path in args.case or CASES:
        loaded, pipeline, binding = load(path)
        host = fresh_inputs(binding, pipeline, seed=int(time.time()) & 0xFFFF)
        batch = next((a.shape[0] for a in host.values() if a.ndim == 3), 1)
        want, first = reference(pipeline, host, binding.params, batch)
        rtol, atol = loaded.spec.check.rtol, loaded.spec.check.atol
        built, times, verdicts = {}, {}, {}
        for label, threads, tuning in variants:
            try:
                b = Built(loaded, pipeline, binding, host, arch, threads, tuning)
            except Exception as exc:  # a variant that does not build is reported, not fatal
                verdicts[label] = f"did not build: {type(exc).__name__}: {exc}"
                continue
            b.run()
            ok, worst = check(b, want, first, rtol, atol)
            built[label], times[label] = b, []
            verdicts[label] = f"{'ok' if ok else 'WRONG'} (worst {worst:.2f} of the tolerance)"
            ok_all &= ok
            print(f"{path.stem}: {label}: {b.resources}; {verdicts[label]}", file=sys.stderr, flush=True)
        for _ in range(args.rounds):
            for label, b in built.items():
                b.run()
                times[label].append(timer.measure(b.run, cupy.cuda.get_current_stream()).median_us)
        for label, b in built.items():  # every launch since the first check must still give the result
            b.repoison()
            b.run()
            ok, _ = check(b, want, first, rtol, atol)
            if not ok:
                verdicts[label] += "; WRONG after the timed launches"
                ok_all = False
        base = float(np.median(times["default"])) if times.get("default") else None
        lines += [f"## {path.stem} {dict(binding.sizes)}", "",
                  "| variant | median us | rounds | vs default | resources | check |", "|---|---|---|---|---|---|"]
        for label, _threads, _tuning in variants:
            if label not in built:
                lines.append(f"| {label} | | | | | {verdicts.get(label, '')} |")
                continue
            t = float(np.median(times[label]))
            ratio = f"{base / t:.3f}x" if base else ""
            lines.append(f"| {label} | {t:.1f} | {' / '.join(f'{x:.1f}' for x in times[label])} | {ratio} | "
                         f"{built[label].resources} | {verdicts[label]} |")
        lines.append("")
        built.clear()
    text = "\n".join(lines)
    print(text)
    out = os.environ.get("OUT")
    if out:
        Path(out, "ab_attention_full.md").write_text(text + "\n")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
