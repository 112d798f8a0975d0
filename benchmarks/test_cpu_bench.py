"""The CPU backend against NumPy, side by side in one pytest-benchmark run, reported as ratios.

Not part of the default test run (``benchmarks/`` is outside ``testpaths``; ``addopts``
disables benchmarks). Run it with:

    pytest benchmarks/test_cpu_bench.py --benchmark-enable -p no:cacheprovider

Each group times our kernels (``CpuExecutor.execute``: every kernel of the pipeline, inputs
already in the arena) and the equivalent NumPy expression on the same inputs; the last test
prints NumPy's time over ours per group, next to the target. ``warm_start`` times a new
process that loads, builds and runs an example pipeline while numba's cache is already warm.
Results and the machine they came from go to ``benchmarks/CPU_RESULTS.md`` by hand.

Our kernels are timed as every process but the first runs them: loaded from numba's cache,
which a child process fills first. The process that compiles a parallel function runs
numba's first copy of its loop, which LLVM optimized once; the cache holds the copy optimized
again inside the function, up to 2x faster (same results: the arithmetic is strict IEEE).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes import plan_pipeline
from cuvil_dsl.runtime.base import Target
from cuvil_dsl.runtime.cpu_executor import CpuExecutor

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"elementwise": 2.5, "softmax": 1.3, "layernorm": 1.3}  # NumPy time / ours, at least
WARM_START_TARGET_S = 0.5
RESULTS: dict[str, dict[str, float]] = {}
ROWS, COLS, ELEMENTS = 4096, 1024, 1 << 24

PROGRAMS = {
    "elementwise": ("pipeline chain(x: f32[N]) -> y: f32[N] { y = relu(x * 1.5 + 0.25) * 2 - 0.5 }",
                    {"N": ELEMENTS}),
    "softmax": ("pipeline rows(x: f32[R, C]) -> y: f32[R, C] { y = softmax(x) }", {"R": ROWS, "C": COLS}),
    "layernorm": ("pipeline norm(x: f32[R, C], w: f32[C], b: f32[C]) -> y: f32[R, C] { y = layernorm(x, w, b) }",
                  {"R": ROWS, "C": COLS}),
}


def _numpy_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def _numpy_layernorm(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + 1e-5) * w + b


NUMPY = {
    "elementwise": lambda x: np.maximum(x * 1.5 + 0.25, 0) * 2 - 0.5,
    "softmax": _numpy_softmax,
    "layernorm": _numpy_layernorm,
}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cuvil-cache")
    os.environ["CUVIL_CACHE_DIR"] = str(path)
    return path


def build_all() -> dict[str, tuple[CpuExecutor, dict[str, np.ndarray]]]:
    """Per group: a built executor with its inputs bound, and the same inputs as arrays."""
    rng = np.random.default_rng(0)
    built = {}
    for group, (source, sizes) in PROGRAMS.items():
        pipeline = check_source(source).module.pipelines[0]
        executor = CpuExecutor.build(pipeline, plan_pipeline(pipeline)[0], sizes, Target("cpu"))
        inputs = {p.name: rng.normal(size=tuple(sizes[d.name] for d in p.type.shape)).astype(np.float32)
                  for p in pipeline.tensor_params}
        executor.run(inputs, {})
        built[group] = executor, inputs
    return built


@pytest.fixture(scope="module")
def case(cache_dir):
    fill = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_cpu_bench; test_cpu_bench.build_all()"
    subprocess.run([sys.executable, "-c", fill], env={**os.environ, "CUVIL_CACHE_DIR": str(cache_dir)}, check=True)
    built = build_all()
    assert all(k.cache_hit for executor, _ in built.values() for k in executor.kernel_reports())
    yield built
    for executor, _ in built.values():
        executor.close()


def _record(group: str, who: str, benchmark) -> None:
    if benchmark.stats is not None:  # None under --benchmark-disable
        RESULTS.setdefault(group, {})[who] = benchmark.stats.stats.min


@pytest.mark.parametrize("group", list(PROGRAMS))
def test_ours(group, case, benchmark):
    benchmark.group = group
    executor, _ = case[group]
    benchmark.pedantic(executor.execute, rounds=20, warmup_rounds=3)
    _record(group, "ours", benchmark)


@pytest.mark.parametrize("group", list(PROGRAMS))
def test_numpy(group, case, benchmark):
    benchmark.group = group
    _, inputs = case[group]
    args = list(inputs.values())
    benchmark.pedantic(NUMPY[group], args=args, rounds=20, warmup_rounds=3)
    _record(group, "numpy", benchmark)


WARM_START = """
import numpy as np, cuvil_dsl
run = cuvil_dsl.load({path!r}).compile(backend="cpu")
run(np.ones((64, 128), np.float16))
"""


def test_warm_start(cache_dir, benchmark):
    """A new process: import, load the example, build (numba's cache is warm), run once."""
    command = [sys.executable, "-c", WARM_START.format(path=str(ROOT / "specs" / "softmax.cuvil"))]
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache_dir)}

    def start() -> None:
        subprocess.run(command, env=env, check=True)

    start()  # fills the cache
    benchmark.group = "warm_start"
    benchmark.pedantic(start, rounds=5, iterations=1)
    _record("warm_start", "ours", benchmark)


def test_report_ratios(capsys):
    """NumPy's time over ours per group (higher is better), and the warm start, next to the targets."""
    lines = [f"CPU backend vs NumPy, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores (min of the rounds)"]
    for group, target in TARGETS.items():
        times = RESULTS.get(group, {})
        if {"ours", "numpy"} <= set(times):
            ratio = times["numpy"] / times["ours"]
            verdict = "meets" if ratio >= target else "misses"
            lines.append(f"  {group:12s} ours {times['ours'] * 1e3:8.2f} ms  numpy {times['numpy'] * 1e3:8.2f} ms  "
                         f"ratio {ratio:5.2f}x  ({verdict} the {target}x target)")
    if "ours" in RESULTS.get("warm_start", {}):
        seconds = RESULTS["warm_start"]["ours"]
        verdict = "meets" if seconds < WARM_START_TARGET_S else "misses"
        lines.append(f"  warm start   {seconds:.2f} s  ({verdict} the {WARM_START_TARGET_S} s target)")
    if len(lines) == 1:
        lines.append("  no numbers: run with --benchmark-enable")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
