"""A/B of the row and elementwise templates' parameters on the GPU, in one run (< 90 s).

    python3 benchmarks/ab_rows.py [--only softmax_f16,...] [--samples 60]
    python3 benchmarks/ab_rows.py --launch-vs-graph   # the default kernels: graph replay vs direct launch

For softmax_f16, softmax_f32, layernorm_f16 and elementwise_f32 (benchmarks/*.yaml) it renders
and compiles each variant (``TUNING`` of ``cuvil_dsl.codegen.cuda_rows`` / ``cuda_elementwise``;
every setting changes the generated source, hence the compile cache key), checks its results
against the float64 reference on fresh random inputs (the spec's inputs, shuffled with another
seed) within the spec's tolerances, and times it as ``cuvil-dsl bench`` does (CUDA events on the
executor's stream, L2 flushed before each sample, warm-up, median of >= 50 samples). Prints a
markdown table (variant, us, GB/s, ratio to the first variant of its benchmark, registers, min
blocks, check) and writes it to ``$OUT/ab_rows.md`` when OUT is set.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings  # noqa: E402
from cuvil_dsl.check import compare, tolerances  # noqa: E402
from cuvil_dsl.codegen import cuda_elementwise, cuda_rows  # noqa: E402
from cuvil_dsl.driver import make_executor, open_spec  # noqa: E402
from cuvil_dsl.reference import execute as reference_execute  # noqa: E402
from cuvil_dsl.reference.executor import HostHooks  # noqa: E402

# (label, rows TUNING, elementwise TUNING); the first is the baseline of the ratios. Rounds 1-2
# of this script (2026-11-29, benchmarks/results/2026-11-29-h200-ab_rows-*.md) chose the defaults:
# 128 threads for f16 rows of 4096 (four 16-byte vectors a thread), no .cs hints on elementwise
# kernels. Round 3 (2026-11-30): softmax f16 at 256 threads with ptxas free (132.1 us in round 2,
# inside the spread of the default's 133.8, so measured again, twice), and elementwise blocks that
# read one contiguous chunk (their unrolled vectors a block apart, not a grid stride apart). Round 3
# measured (2026-11-30-h200-ab_rows-round3.md): softmax f16 256 threads 131.5/131.6 us against
# 133.6/133.9 for 128 (default changed); elementwise chunked 132.8/132.9 against 133.1/133.2.
# Round 4: the new softmax default, and elementwise block sizes around torch.compile's (measured:
# 128 threads, chunked, 2 vectors 131.8 us, now the default; 2026-11-30-h200-ab_rows-round4.md).
# Round 5: elementwise block sizes around the new default, and load qualifiers.
ROW_VARIANTS = {
    "softmax_f16": [
        ("default (256 threads/row, min 4 blocks)", {}, {}),
        ("128 threads/row (round 2 default)", {"threads": 128}, {}),
    ],
    "softmax_f32": [
        ("default (256 threads/row)", {}, {}),
    ],
    "layernorm_f16": [
        ("default (128 threads/row, no prefetch, min 6 blocks: session 13)", {}, {}),
        ("raw cache, min 8 blocks (64 registers)", {"raw_cache": True}, {}),
        ("raw cache, min 6 blocks", {"raw_cache": True, "min_blocks": 6}, {}),
        ("previous default (prefetch w,b, min 6 blocks)", {"prefetch": True}, {}),
        # measured in session 13's second call: 135.2 / 135.6 against 132.5 for both rows above
        ("no prefetch, min 8 blocks (64 registers)", {"min_blocks": 8}, {}),
        ("default again", {}, {}),
    ],
    "elementwise_f32": [
        ("default (128 threads, chunked, 2 vectors)", {}, {}),
        ("64 threads, chunked, 2 vectors", {}, {"threads": 64}),
        ("128 threads, 1 vector", {}, {"unroll": 1}),
        ("256 threads, 1 vector", {}, {"threads": 256, "unroll": 1}),
        ("loads ld.global.nc", {}, {"load_hint": "nc"}),
        ("loads ld.global.nc.L1::no_allocate", {}, {"load_hint": "nc_noalloc"}),
        ("loads ld.global.L2::256B", {}, {"load_hint": "l2_256"}),
        ("default again", {}, {}),
    ],
    # session 13: the benchmarks' pipelines at other shapes (benchmarks/shapes/, first run
    # 2026-11-30-h200-shapes-session13.md) where the templates fell behind: rows of 32768 halves streamed
    # three times (the cache budget held 4096 at 256 threads), layernorm rows of 16384 at one block of
    # 512 threads a multiprocessor (104 registers with w and b prefetched), of 1024 at 2 blocks of 256.
    # First call (`-ab_rows-session13-shapes.md`): long rows 512 threads cached 169.7 us, 1024 threads
    # 180.8, against 233.7 streamed; wide layernorm without prefetch at 2 blocks of 512 136.5 against
    # 206.0 (1024 threads 225.2-226.8); narrow without prefetch 134.2 against 151.5; the benchmark's
    # layernorm without prefetch 133.3 against 132.9 / 133.3. The defaults now (cuda_rows: threads to
    # cache a long single-input row, PREFETCH False, a second block for a lone block of 512+ threads);
    # the previous defaults by their tuning, for comparison (`-ab_rows-session13-defaults.md`: 168.6
    # against 234.8, 135.6 against 205.1, 133.4 against 150.4).
    "shapes/softmax_f16-long-rows": [
        ("default (512 threads, cached)", {}, {}),
        ("previous default (256 threads, streamed)", {"threads": 256}, {}),
        ("default again", {}, {}),
    ],
    "shapes/layernorm_f16-wide": [
        ("default (512 threads, no prefetch, min 2 blocks)", {}, {}),
        ("previous default (prefetch w,b, 1 block)", {"prefetch": True}, {}),
        ("default again", {}, {}),
    ],
    "shapes/layernorm_f16-narrow": [
        ("default (a warp a row, no prefetch)", {}, {}),
        ("4 rows a warp, raw cache (128 registers)", {"raw_cache": True, "warp_rows": 4}, {}),
        ("16 lanes a row, min 2 blocks (128 registers)", {"row_lanes": 16, "min_blocks": 2}, {}),
        ("16 lanes a row, raw cache, min 3 blocks (80 registers)", {"row_lanes": 16, "raw_cache": True, "min_blocks": 3}, {}),
    ],
    # session 16: rows of at most 1024 elements (a warp a row). Each warp reduced one row and left, so a
    # warp's loads were in flight only before its first reduction, and blocks of 8 warps came and went
    # by the tens of thousands. "warp_rows": a warp takes R consecutive rows, the next row's loads issued
    # before the current row's reductions; "raw_cache": the cached row held as halves (exact), half the
    # registers, so more warps or rows fit.
    # First call (`2026-12-01-h200-ab_rows-session16-1.md`, 3 rotated rounds): short softmax rows 134.3 us by
    # default; 2 rows a warp 142.1, with the raw cache 132.3; 4 rows raw 133.0, 4 rows at min 4 blocks 133.9;
    # narrow layernorm 133.3 by default, every variant slower (raw at min 4 blocks 134.4, 4 rows raw 134.1,
    # 2 rows 156-158); f32 rows of 1000 130.4, 2 rows 131.2. Second call: 16 lanes a row (two rows a warp at
    # once, twice the vectors a thread), and the best of the first call around its registers.
    "shapes/softmax_f16-short-rows": [
        ("a row a warp (the previous default, 31 registers)", {"warp_rows": 1, "raw_cache": False}, {}),
        ("2 rows a warp, raw cache (47 registers; the default since session 16)", {"warp_rows": 2, "raw_cache": True}, {}),
        ("2 rows a warp, raw cache, min 6 blocks (40 registers)", {"warp_rows": 2, "raw_cache": True, "min_blocks": 6}, {}),
        ("3 rows a warp, raw cache (47 registers)", {"warp_rows": 3, "raw_cache": True}, {}),
        ("16 lanes a row, raw cache (46 registers)", {"row_lanes": 16, "raw_cache": True}, {}),
        ("16 lanes a row, 2 rows, raw cache, min 3 blocks (80 registers)",
         {"row_lanes": 16, "warp_rows": 2, "raw_cache": True, "min_blocks": 3}, {}),
    ],
    # Third call (`-session16-3.md`): the rule as first written (short 16-bit rows of one cached operand: 2 rows
    # a warp, halves) also took a layernorm's rows of 512, whose final pass loads the weight and bias: 147.5 us
    # against 134.4 a row a warp. The rule now takes only rows whose final pass reads nothing else along the row.
    # Fourth call (`-session16-4.md`, 2 rounds): blocks of 256 132.6 us, 128 132.5, 512 146.9, 1024 148.3 (at 47
    # registers 40 warps a multiprocessor fit in blocks of 128 or 256, 32 in blocks of 512 or 1024).
    "shapes/softmax_f16-short-rows#blocks": [
        ("default (2 rows a warp, halves, blocks of 256)", {}, {}),
        ("blocks of 128", {"warp_block": 128}, {}),
        ("blocks of 512", {"warp_block": 512}, {}),
        ("blocks of 1024", {"warp_block": 1024}, {}),
    ],
    "shapes/layernorm_f16-short-rows": [
        ("default (a row a warp)", {}, {}),
        ("2 rows a warp, raw cache (the first rule)", {"warp_rows": 2, "raw_cache": True}, {}),
    ],
    # session 18: elementwise_f32 at 2^20 (8 MB moved, 1024 blocks of the default shape, about 8 a multiprocessor):
    # 7.4 us in `cuvil-dsl bench` against Triton's 6.4 (`2026-12-01-h200-shapes-session18.json`). More work a thread
    # (fewer blocks to schedule) or larger blocks, predicted 0.2-0.5 us faster if block scheduling is the cost.
    # Measured (3 rounds, `2026-12-01-h200-ab_rows-session18-elementwise-small.md`): default 7.4, 4 or 8 vectors 7.2,
    # 256 threads 7.5 / 7.3, 512 threads 7.5, one wave 7.6: the best inside the default's spread; unchanged.
    "shapes/elementwise_f32-small": [
        ("default (128 threads, chunked, 2 vectors)", {}, {}),
        ("128 threads, chunked, 4 vectors", {}, {"unroll": 4}),
        ("128 threads, chunked, 8 vectors", {}, {"unroll": 8}),
        ("256 threads, chunked, 2 vectors", {}, {"threads": 256}),
        ("256 threads, chunked, 4 vectors", {}, {"threads": 256, "unroll": 4}),
        ("512 threads, chunked, 2 vectors", {}, {"threads": 512}),
        ("one wave, 128 threads, 2 vectors a grid stride apart", {}, {"waves": 1}),
    ],
    "shapes/softmax_f32-odd-rows": [
        ("default (a warp a row, 48 registers)", {}, {}),
        ("16 lanes a row, min 3 blocks (78 registers)", {"row_lanes": 16, "min_blocks": 3}, {}),
        ("16 lanes a row, min 2 blocks (128 registers)", {"row_lanes": 16, "min_blocks": 2}, {}),
    ],
}


def fresh_inputs(session, seed: int) -> None:
    """The spec's inputs shuffled: same distribution, values the spec's seed never gave."""
    rng = np.random.default_rng(seed)
    for name, array in list(session.inputs.items()):
        flat = np.ascontiguousarray(array).reshape(-1).copy()
        rng.shuffle(flat)
        session.inputs[name] = flat.reshape(array.shape)


def bytes_moved(session, outputs: dict) -> int:
    return sum(a.nbytes for a in session.inputs.values()) + sum(a.nbytes for a in outputs.values())


def run_variant(session, expected, rows: dict, ew: dict, timer: GpuTimer) -> dict:
    cuda_rows.TUNING.clear()
    cuda_rows.TUNING.update(rows)
    cuda_elementwise.TUNING.clear()
    cuda_elementwise.TUNING.update(ew)
    executor = make_executor(session)
    try:
        outputs = executor.run(session.inputs, session.binding.params, HostHooks())
        checks = []
        for res in session.pipeline.results:
            check = session.spec.check
            rtol, atol = tolerances(res.type.dtype, check.rtol, check.atol, session.target.tf32)
            checks.append(compare(res.name, outputs[res.name], expected[res.name], res.type.dtype, rtol, atol))
        reports = executor.kernel_reports()
        source = next(iter(executor.sources().values()))
        note = next((line[3:] for line in source.splitlines() if line.startswith("// row template")
                     or line.startswith("// elementwise template")), "")
        m = timer.measure(lambda: executor.execute(None), executor.stream)
        return {"us": m.median_us, "spread": m.spread, "samples": m.samples,
                "ok": all(c.passed for c in checks), "max_abs": max(c.max_abs for c in checks),
                "regs": ",".join(str(r.registers) for r in reports),
                "spill": sum((r.spill_bytes or 0) for r in reports), "note": note,
                "bytes": bytes_moved(session, outputs)}
    finally:
        executor.close()
        cuda_rows.TUNING.clear()
        cuda_elementwise.TUNING.clear()
        gc.collect()


def launch_vs_graph(name: str, timer: GpuTimer, rounds: int = 3) -> list[str]:
    """The default kernels of ``name``, timed in interleaved rounds two ways: replaying the spec's graph
    (what ``cuvil-dsl bench`` times) and launching the same kernels directly (what a PyTorch or Triton
    baseline times), to tell the graph's own device-side cost from the kernel's."""
    from cuvil_dsl.runtime.graphs import GraphRunner

    session = open_spec(ROOT / "benchmarks" / f"{name}.yaml", backend="cuda")
    executor = make_executor(session)
    try:
        executor.run(session.inputs, session.binding.params, HostHooks())  # checked, graphs captured
        kernels = [k for step in executor._steps for k in (step.kernels if isinstance(step, GraphRunner) else [step])]
        stream = executor._work

        def direct():
            for kernel in kernels:
                kernel.launch(stream.ptr)

        out = []
        for r in range(rounds):
            graph = timer.measure(lambda: executor.execute(None), executor.stream).median_us
            launched = timer.measure(direct, executor.stream).median_us
            out.append(f"| {name} | round {r + 1} | graph replay {graph:.1f} us | direct launch {launched:.1f} us | "
                       f"{graph / launched:.4f} |")
            print(out[-1], flush=True)
        return out
    finally:
        executor.close()


def time_variants(name: str, session, expected, variants: list, rounds: int, timer: GpuTimer) -> tuple[list[str], bool]:
    """Every variant checked and timed ``rounds`` times, each round starting one variant later (what ran
    just before a kernel can move its time); with several rounds, a last line a variant gives the median
    of its rounds and its ratio to the first variant's."""
    lines, failed, times = [], False, {}
    for rnd in range(rounds):
        shift = rnd % len(variants)
        for label, rows, ew in variants[shift:] + variants[:shift]:
            shown = f"{label} [round {rnd + 1}]" if rounds > 1 else label
            try:
                r = run_variant(session, expected, rows, ew, timer)
            except Exception as exc:  # one broken variant must not hide the others
                failed = True
                lines.append(f"| {name} | {shown} | - | - | - | - | - | - | ERROR {type(exc).__name__}: {str(exc)[:160]} | |")
                print(lines[-1], flush=True)
                continue
            times.setdefault(label, []).append(r["us"])
            failed |= not r["ok"]
            gbs = r["bytes"] / (r["us"] * 1e-6) / 1e9
            base = times.get(variants[0][0], [r["us"]])[-1]
            lines.append(f"| {name} | {shown} | {r['us']:.1f} | {gbs:.0f} | {r['us'] / base:.3f} | {r['spread']:.3f} | "
                         f"{r['regs']} | {r['spill']} | {'ok' if r['ok'] else 'FAIL'} ({r['max_abs']:.2e}) | {r['note']} |")
            print(lines[-1], flush=True)
    if rounds > 1 and variants[0][0] in times:
        base = float(np.median(times[variants[0][0]]))
        for label, *_ in variants:
            if label in times:
                med = float(np.median(times[label]))
                rounds_text = " / ".join(f"{t:.1f}" for t in times[label])
                lines.append(f"| {name} | **{label}: median of rounds** | {med:.1f} | | {med / base:.3f} | {rounds_text} | | | | |")
                print(lines[-1], flush=True)
    return lines, failed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma list of benchmark names")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every variant this many times, each round starting one variant later")
    parser.add_argument("--launch-vs-graph", action="store_true",
                        help="only time each benchmark's default kernels by graph replay and by direct launch")
    args = parser.parse_args()
    names = [n for n in ROW_VARIANTS if not args.only or n in args.only.split(",")]
    settings = Settings(budget_s=0.012, min_samples=args.samples, max_samples=max(args.samples, 200),
                        warmup_s=0.005, e2e_samples=1)
    clock = CudaClock()
    timer = GpuTimer(clock, settings)
    started = time.perf_counter()
    lines = ["| benchmark | variant | us | GB/s | vs first | spread | regs | spill | check (max abs) | template |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    if args.launch_vs_graph:
        lines = ["| benchmark | round | graph | launch | graph / launch |", "|---|---|---|---|---|"]
        for name in names:
            lines += launch_vs_graph(name, timer)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "ab_rows-launch-vs-graph.md").write_text("\n".join(lines) + "\n")
        return 0
    print("\n".join(lines), flush=True)
    failed = False
    for name in names:
        # "SPEC#LABEL": another list of variants of the same spec
        session = open_spec(ROOT / "benchmarks" / f"{name.partition('#')[0]}.yaml", backend="cuda")
        fresh_inputs(session, args.seed)
        expected = reference_execute(session.pipeline, session.inputs, session.binding.params)
        body, bad = time_variants(name, session, expected, ROW_VARIANTS[name], args.rounds, timer)
        lines += body
        failed |= bad
        del session, expected
        gc.collect()
    lines.append("")
    lines.append(f"({time.perf_counter() - started:.0f} s; median of >= {args.samples} samples, L2 flushed)")
    print(lines[-1])
    out = os.environ.get("OUT")
    if out:
        Path(out, "ab_rows.md").write_text("\n".join(lines) + "\n")
    clock.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
