"""Lifecycle on the GPU: building, running and closing pipelines over and over must give back
device memory, CUDA modules, graphs and file descriptors; a process that exits with pipelines
still alive (graphs captured, modules loaded) must exit 0 with nothing on standard error.

The host half (parse, plan, render, compile cycles; NVRTC programs) is
tests/hardening/test_hardening_lifecycle.py. Run these on a GPU machine:
``pytest -m gpu tests/gpu/test_lifecycle_gpu.py`` (skipped where there is none).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "specs" / "softmax.cuvil"  # graph `forward` around a kernel block
GEMM = ROOT / "specs" / "gemm_bias_gelu.cuvil"  # a GEMM kernel in a graph
CYCLES = 1000
MEMORY_SLACK = 32 << 20  # the driver's own bookkeeping may move a little; a leak of 1,000 arenas would not fit


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def _free_device_bytes() -> int:
    """The device's free memory: a device-wide number, so other processes on the GPU move it too
    (the tests that read it are marked ``alone``)."""
    import cupy

    cupy.cuda.runtime.deviceSynchronize()
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    return cupy.cuda.runtime.memGetInfo()[0]


def _cycle(program, inputs: dict) -> None:
    compiled = program.compile(backend="cuda")
    try:
        out = compiled(**inputs)
        assert out is not None
    finally:
        compiled.close()


def _sizes(pipeline, rows: int) -> dict[str, int]:
    """Every symbol 128, but the first one (the rows of the first input) ``rows``."""
    symbols = list(pipeline.symbols())
    return {s: (rows if i == 0 else 128) for i, s in enumerate(symbols)}


def _inputs_for(program, rows: int = 64, device: bool = False) -> dict:
    import cupy

    from cuvil_dsl.types import concrete_shape

    sizes = _sizes(program.pipeline, rows)
    arrays = {}
    for param in program.pipeline.tensor_params:
        shape = concrete_shape(param.type.shape, sizes)
        data = np.random.default_rng(0).normal(size=shape).astype(param.type.dtype.numpy)
        arrays[param.name] = cupy.asarray(data) if device else data
    return arrays


@pytest.mark.alone
@pytest.mark.parametrize("device_inputs", [False, True], ids=["host arrays", "device arrays"])
def test_a_thousand_build_run_close_cycles_return_to_baseline(device_inputs):
    import cuvil_dsl

    program = cuvil_dsl.load(SOFTMAX)
    inputs = _inputs_for(program, device=device_inputs)
    for _ in range(10):  # warm: CUDA context, cuBLAS handles, the compile cache, lazy imports
        _cycle(program, inputs)
    free_before, fds_before = _free_device_bytes(), _open_fds()
    for _ in range(CYCLES):
        _cycle(program, inputs)
    free_after, fds_after = _free_device_bytes(), _open_fds()
    assert fds_after == fds_before
    assert free_before - free_after < MEMORY_SLACK, (
        f"device memory not returned: {(free_before - free_after) / 2**20:.1f} MiB less free after {CYCLES} cycles")


@pytest.mark.alone
def test_many_shapes_then_close_releases_every_executor():
    """One compiled pipeline, executors for 50 shape signatures (each with its arena, modules and
    graph), closed once: everything comes back."""
    import cuvil_dsl

    program = cuvil_dsl.load(SOFTMAX)
    _cycle(program, _inputs_for(program))
    free_before = _free_device_bytes()
    compiled = program.compile(backend="cuda")
    for rows in range(1, 51):
        compiled(**_inputs_for(program, rows=rows * 8))
    assert len(compiled.executors) == 50
    compiled.close()
    assert free_before - _free_device_bytes() < MEMORY_SLACK


@pytest.mark.alone
def test_split_k_workspaces_come_back(tmp_path):
    """A GEMM split along K through its workspace (8 MiB a shape here): 100 build, run, close cycles give
    the workspaces back with everything else."""
    import cupy

    import cuvil_dsl

    source = tmp_path / "split.cuvil"
    source.write_text("pipeline g(a: f16[M, K], b: f16[K, N]) -> y: f16[M, N] {\n"
                      "    graph forward {\n        y = relu(a @ b)\n    }\n}\n")
    program = cuvil_dsl.load(source)
    rng = np.random.default_rng(3)
    inputs = {"a": cupy.asarray(rng.normal(scale=0.05, size=(1024, 8192)).astype(np.float16)),
              "b": cupy.asarray(rng.normal(scale=0.05, size=(8192, 1024)).astype(np.float16))}
    compiled = program.compile(backend="cuda")
    compiled(**inputs)
    (executor,) = compiled.executors.values()
    if not executor._cells.workspaces():
        pytest.skip("this GPU's GEMM is not split along K (sm_90 only)")
    compiled.close()
    free_before = _free_device_bytes()
    for _ in range(100):
        _cycle(program, inputs)
    assert free_before - _free_device_bytes() < MEMORY_SLACK


SHUTDOWN = textwrap.dedent("""
    import sys
    import numpy as np
    import cuvil_dsl
    from cuvil_dsl.types import concrete_shape

    KEEP = []  # alive until interpreter shutdown: executors with captured graphs and loaded modules
    for path in sys.argv[1:]:
        program = cuvil_dsl.load(path)
        compiled = program.compile(backend="cuda")
        sizes = {{s: 128 for s in program.pipeline.symbols()}}
        arrays = {{p.name: np.ones(concrete_shape(p.type.shape, sizes), p.type.dtype.numpy)
                  for p in program.pipeline.tensor_params}}
        for _ in range(3):  # the second call replays the captured graph
            compiled(**arrays)
        KEEP.append(compiled)
    cycle = [KEEP]
    cycle.append(cycle)  # and one in a reference cycle, freed (if at all) by the final collection
    {ending}
""")


@pytest.mark.parametrize("ending", ["pass", "sys.exit(0)", "import os; os.environ.get('x')  # plain fall-through"])
def test_interpreter_shutdown_with_live_graphs_and_modules(tmp_path, ending):
    script = tmp_path / "shutdown.py"
    script.write_text(SHUTDOWN.format(ending=ending))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, str(script), str(SOFTMAX), str(GEMM)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr


def test_shutdown_during_pending_gpu_work_exits_cleanly(tmp_path):
    """Exit right after launching (no synchronisation): teardown must wait or cope, never crash."""
    script = tmp_path / "pending.py"
    script.write_text(textwrap.dedent("""
        import cupy, numpy as np, cuvil_dsl
        program = cuvil_dsl.load(%r)
        compiled = program.compile(backend="cuda")
        x = cupy.asarray(np.ones((4096, 1024), np.float16))
        for _ in range(50):
            y = compiled(x)  # device in, device out: nothing forces a wait
    """ % str(SOFTMAX)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and done.stderr == "", done.stderr
