"""Warm start of the CPU backend in a fresh process, with a breakdown by stage (issue 5).

    python benchmarks/startup.py [--rounds 7] [--spec specs/softmax.cuvil] [--cli specs/softmax.yaml]

A first child process fills the caches (numba's, the parser's); then every round starts a new
interpreter that imports, loads the example, compiles it for ``backend="cpu"`` and calls it
once. Each child times its own stages with ``time.perf_counter``; the parent times the whole
process (interpreter start and exit included). Medians and minimums over the rounds are
printed. A measurement, not a test: shared machines are noisy, so it asserts nothing.

``--cli`` also times ``cuvil-dsl run SPEC --backend cpu`` as a whole process (it also runs the
float64 reference, the checks and the timing loop, so it is the start-up plus that work).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import sys, time, json
t0 = time.perf_counter()
marks = {}
def mark(name):
    marks[name] = time.perf_counter()
import numpy as np
mark("import numpy")
import cuvil_dsl
program_path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from cuvil_dsl import api
mark("import cuvil_dsl.api")
program = cuvil_dsl.load(program_path)
mark("load (parse, check)")
compiled = program.compile(backend="cpu")
mark("compile(backend=cpu)")
x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float16)
executor = compiled.executor({"R": rows, "C": cols})
mark("build executor (plan, render, numba import + cache load)")
y = compiled(x)
mark("first call")
light = sys.modules.get("cuvil_dsl.runtime.numba_light")
deferred = sorted(m for m, v in list(sys.modules.items()) if light is not None and light.is_deferred(v))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "cuda", "lark", "pydantic", "yaml",
                                                            "matplotlib", "scipy", "numba", "llvmlite")
                and m not in deferred)  # in sys.modules, but their code never ran
previous, stages = t0, {}
for name, at in marks.items():
    stages[name] = at - previous
    previous = at
stages["in-process total"] = previous - t0
print(json.dumps({"stages": stages, "hit": [k.cache_hit for k in executor.kernel_reports()], "deferred": deferred,
                  "top_level_imported": sorted({m.split(".")[0] for m in loaded}),
                  "cuda_renderer": "cuvil_dsl.codegen.cuda" in sys.modules,
                  "compile_service": "cuvil_dsl.compile.service" in sys.modules}))
"""


def _children_cpu() -> float:
    """CPU seconds (user + system) of the children waited for so far (0 where unknown)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(program: str, env: dict, rows: int, cols: int) -> tuple[dict, float]:
    started, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, "-c", CHILD, program, str(rows), str(cols)], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"child failed ({done.returncode}):\n{done.stderr}")
    result = json.loads(done.stdout.splitlines()[-1])
    result["cpu"] = _children_cpu() - cpu  # less sensitive than the wall clock to a busy machine
    return result, wall


def _cli(spec: str, env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cuvil_dsl", "run", spec, "--backend", "cpu", "--iterations", "1"],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"cuvil-dsl run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--spec", default="specs/softmax.cuvil", help="the .cuvil example (a softmax over R, C)")
    parser.add_argument("--shape", default="64,1024", help="R,C of the input")
    parser.add_argument("--cli", metavar="SPEC", help="also time `cuvil-dsl run SPEC --backend cpu`")
    parser.add_argument("--cache-dir", help="a cache folder to use (default: a new temporary one)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE as it is (every module compiled from source in every process)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows, cols = (int(v) for v in args.shape.split(","))
    with tempfile.TemporaryDirectory(prefix="cuvil-startup-") as tmp:
        cache = Path(args.cache_dir or Path(tmp) / "cache")
        env = {**os.environ, "CUVIL_CACHE_DIR": str(cache)}
        if not args.no_bytecode:  # as an installed package runs: from .pyc files (kept out of the tree)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        first, first_wall = _child(args.spec, env, rows, cols)  # fills the caches
        rounds = [_child(args.spec, env, rows, cols) for _ in range(args.rounds)]
        cli = []
        if args.cli:
            _cli(args.cli, env)
            cli = [_cli(args.cli, env) for _ in range(args.rounds)]
    names = list(rounds[0][0]["stages"])
    summary = {
        "cold_process_s": first_wall,
        "stages_median_s": {n: statistics.median(r["stages"][n] for r, _ in rounds) for n in names},
        "stages_min_s": {n: min(r["stages"][n] for r, _ in rounds) for n in names},
        "process_wall_median_s": statistics.median(w for _, w in rounds),
        "process_wall_min_s": min(w for _, w in rounds),
        "process_cpu_median_s": statistics.median(r["cpu"] for r, _ in rounds),
        "process_cpu_min_s": min(r["cpu"] for r, _ in rounds),
        "cache_hit": rounds[-1][0]["hit"],
        "top_level_imported": rounds[-1][0]["top_level_imported"],
        "deferred_not_run": rounds[-1][0]["deferred"],
        "cuda_renderer_imported": rounds[-1][0]["cuda_renderer"],
        "compile_service_imported": rounds[-1][0]["compile_service"],
        "cpus": os.cpu_count(),
        "bytecode": not args.no_bytecode,
    }
    if cli:
        summary["cli_run_wall_median_s"] = statistics.median(cli)
        summary["cli_run_wall_min_s"] = min(cli)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"warm start of {args.spec} [{rows}, {cols}] f16, backend cpu, {args.rounds} fresh processes, "
          f"{os.cpu_count()} cpus, {'from .pyc files' if not args.no_bytecode else 'without .pyc files'} "
          f"(first, cold process: {first_wall:.2f} s)")
    print(f"  {'stage':58s} {'median':>8s} {'min':>8s}")
    for n in names:
        print(f"  {n:58s} {summary['stages_median_s'][n]:8.3f} {summary['stages_min_s'][n]:8.3f}")
    print(f"  {'whole process (interpreter start and exit included)':58s} "
          f"{summary['process_wall_median_s']:8.3f} {summary['process_wall_min_s']:8.3f}")
    print(f"  {'whole process, CPU time (user + system, all threads)':58s} "
          f"{summary['process_cpu_median_s']:8.3f} {summary['process_cpu_min_s']:8.3f}")
    if cli:
        print(f"  {'cuvil-dsl run ' + args.cli + ' --backend cpu --iterations 1':58s} "
              f"{summary['cli_run_wall_median_s']:8.3f} {summary['cli_run_wall_min_s']:8.3f}")
    print(f"  numba cache hit: {summary['cache_hit']}; packages imported: {', '.join(summary['top_level_imported'])} "
          f"(deferred, never run: {', '.join(summary['deferred_not_run']) or 'none'}); "
          f"CUDA renderer imported: {summary['cuda_renderer_imported']}; "
          f"compile service imported: {summary['compile_service_imported']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
