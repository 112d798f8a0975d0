"""The CUDA runtime on a real GPU: correctness, graphs, guards, faults, rebinding, caching, overhead.

Two kinds of test:

* *hand-made* pipelines (a small program, a plan and CUDA C written here) exercise the runtime
  alone: replay against eager execution, 1000 replays, in-place graph updates, guard bands
  (a kernel patched to write one element past its output), a faulting kernel (in a subprocess,
  because the fault ruins the CUDA context), timing and host overhead;
* *full-stack* tests run every ``specs/*.yaml`` example through planner, renderer, compiler and
  runtime, and the Python API on NumPy, CuPy and PyTorch arrays.

Run on a GPU machine: ``pytest -m gpu tests/gpu`` (they are skipped where there is none).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.check import compare
from cuvil_dsl.codegen.artifact import KernelArg, RenderedKernel
from cuvil_dsl.compile import CompileUnit, compile_units
from cuvil_dsl.diagnostics import RunFailure, UserError
from cuvil_dsl.frontend import check_source
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.plan import Buffer, FusedKernel, FusionPlan, GraphStep, HostStep, KernelConfig, Launch
from cuvil_dsl.reference.executor import HostHooks, execute
from cuvil_dsl.runtime.base import Target
from cuvil_dsl.types import DType

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"
THIS = Path(__file__).resolve()
BLOCK = 256

SCALE_ADD = """\
pipeline scale_add(x: f32[N], alpha: f32 = 2.0) -> y: f32[N] {
    graph forward {
        h = x * alpha
        y = h + 1.0
    }
    print(y)
}
"""

SCALE_KERNEL = r"""
extern "C" __global__ void scale_add_forward_k1(const float* __restrict__ x, float* __restrict__ h, float alpha) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < %(n)dLL) h[i] = x[i] * alpha;
}
"""

# The second kernel, with the line that is patched to inject faults.
BIAS_KERNEL = r"""
extern "C" __global__ void scale_add_forward_k2(const float* __restrict__ h, float* __restrict__ y) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    %(body)s
}
"""
BIAS_OK = "if (i < %(n)dLL) y[i] = h[i] + 1.0f;"
BIAS_OVERRUN = "if (i < %(n)dLL) y[i] = h[i] + 1.0f; if (i == %(n)dLL) y[i] = 0.0f;"  # one element past y
BIAS_FAULT = "if (i == 0) *(volatile float*)8 = 1.0f;"  # an illegal address
BIAS_FAR = "if (i < %(n)dLL) y[i] = h[i] + 1.0f; if (i == 0) y[1LL << 28] = 0.0f;"  # 1 GiB past y


def _target():
    from cuvil_dsl.runtime.device import device_arch

    return Target(backend="cuda", arch=device_arch(0))


def _rendered(name: str, entry: str, source: str, n: int, args: tuple, op: ir.Op, graph: str | None):
    blocks = (n + BLOCK - 1) // BLOCK
    return RenderedKernel(name, entry, source, (blocks, 1, 1), (BLOCK, 1, 1), 0, args, (), graph, op.span)


def _fused(name: str, op: ir.Op, inputs: tuple, outputs: tuple, uniforms: tuple, graph: str | None):
    return FusedKernel(name, "elementwise", (op,), inputs, outputs, uniforms, None, KernelConfig(), graph, None, op.span)


def scale_add(n: int, bias: str = BIAS_OK, use_graphs: bool = True, graphs=None):
    """The hand-made ``scale_add`` pipeline at N = ``n``: two kernels in graph ``forward``, then print(y)."""
    from cuvil_dsl.runtime.cuda_executor import CudaExecutor

    pipeline = check_source(SCALE_ADD, "scale_add.cuvil").module.pipelines[0]
    named = {op.out: op for op in pipeline.ops() if op.named}
    f32 = DType.F32
    k1 = _rendered("forward_k1", "scale_add_forward_k1", SCALE_KERNEL % {"n": n}, n,
                   (KernelArg("buffer", "x", f32, "const float* __restrict__"),
                    KernelArg("buffer", "h", f32, "float* __restrict__"),
                    KernelArg("scalar", "alpha", f32, "float")), named["h"], "forward")
    k2 = _rendered("forward_k2", "scale_add_forward_k2", BIAS_KERNEL % {"body": bias % {"n": n}}, n,
                   (KernelArg("buffer", "h", f32, "const float* __restrict__"),
                    KernelArg("buffer", "y", f32, "float* __restrict__")), named["y"], "forward")
    printed = next(s for s, _g, _k in ir.walk(pipeline.body) if isinstance(s, ir.HostStmt))
    span = next(s.span for s, _g, _k in ir.walk(pipeline.body) if isinstance(s, ir.Block))
    plan = FusionPlan(
        pipeline, (),
        (GraphStep("forward", (Launch(_fused("forward_k1", named["h"], ("x",), ("h",), ("alpha",), "forward")),
                               Launch(_fused("forward_k2", named["y"], ("h",), ("y",), (), "forward"))), span),
         HostStep(printed)),
        (Buffer("x", pipeline.params[0].type, "input"), Buffer("h", named["h"].type, "intermediate"),
         Buffer("y", pipeline.results[0].type, "result")),
    )
    target = _target()
    units = compile_units([CompileUnit(k.entry, k.source, (k.entry,)) for k in (k1, k2)], target.arch)
    return CudaExecutor(pipeline, plan, {"N": n}, target, (k1, k2), units, graphs=graphs, use_graphs=use_graphs)


def chain(n: int, length: int = 8, use_graphs: bool = True):
    """A hand-made graph of ``length`` elementwise kernels (a_i = a_{i-1} * 1.0001 + 0.5)."""
    from cuvil_dsl.runtime.cuda_executor import CudaExecutor

    names = ["x"] + [f"a{i}" for i in range(1, length)] + ["y"]
    body = "\n".join(f"        {dst} = {src} * 1.0001 + 0.5" for src, dst in zip(names, names[1:]))
    source = f"pipeline chain(x: f32[N]) -> y: f32[N] {{\n    graph g {{\n{body}\n    }}\n}}\n"
    pipeline = check_source(source, "chain.cuvil").module.pipelines[0]
    named = {op.out: op for op in pipeline.ops() if op.named}
    kernels, launches = [], []
    for index, (src, dst) in enumerate(zip(names, names[1:]), start=1):
        entry = f"chain_g_k{index}"
        code = (f'extern "C" __global__ void {entry}(const float* __restrict__ a, float* __restrict__ b) {{\n'
                f"    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                f"    if (i < {n}LL) b[i] = a[i] * 1.0001f + 0.5f;\n}}\n")
        args = (KernelArg("buffer", src, DType.F32, "const float*"), KernelArg("buffer", dst, DType.F32, "float*"))
        kernels.append(_rendered(f"g_k{index}", entry, code, n, args, named[dst], "g"))
        launches.append(Launch(_fused(f"g_k{index}", named[dst], (src,), (dst,), (), "g")))
    buffers = [Buffer("x", pipeline.params[0].type, "input")]
    buffers += [Buffer(name, named[name].type, "intermediate") for name in names[1:-1]]
    buffers.append(Buffer("y", pipeline.results[0].type, "result"))
    span = next(s.span for s, _g, _k in ir.walk(pipeline.body) if isinstance(s, ir.Block))
    plan = FusionPlan(pipeline, (), (GraphStep("g", tuple(launches), span),), tuple(buffers))
    target = _target()
    units = compile_units([CompileUnit(k.entry, k.source, (k.entry,)) for k in kernels], target.arch)
    return CudaExecutor(pipeline, plan, {"N": n}, target, kernels, units, use_graphs=use_graphs)


def f32_input(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=n).astype(np.float32)


def expected_scale_add(x: np.ndarray, alpha: float) -> np.ndarray:
    return x * np.float32(alpha) + np.float32(1.0)


class Recorder(HostHooks):
    def __init__(self):
        super().__init__()
        self.printed = []

    def on_print(self, name, dtype, value):
        self.printed.append((name, dtype, np.array(value)))


# -- hand-made pipelines: the runtime alone -----------------------------------------------------


def test_graph_replay_equals_eager_execution_bit_for_bit():
    n = 10_000  # not a multiple of the block size
    x = f32_input(n)
    replayed, eager = scale_add(n), scale_add(n, use_graphs=False)
    out_graph = replayed.run({"x": x}, {"alpha": 1.5})
    out_eager = eager.run({"x": x}, {"alpha": 1.5})
    np.testing.assert_array_equal(out_graph["y"], expected_scale_add(x, 1.5))
    np.testing.assert_array_equal(out_graph["y"], out_eager["y"])
    graph_snap, eager_snap = replayed.snapshot(), eager.snapshot()
    assert [b.digest for b in graph_snap.buffers] == [b.digest for b in eager_snap.buffers]
    assert graph_snap.damaged_guards() == [] and replayed.graphs.stats.instantiations == 1


def test_thousand_replays_give_identical_snapshots():
    n = 4096
    executor = scale_add(n)
    executor.run({"x": f32_input(n)}, {"alpha": 0.75})
    first = executor.snapshot()
    with executor.device:
        for _ in range(1000):
            executor.execute()
    assert executor.snapshot() == first
    assert executor.graphs.stats.captures == 1 and executor.graphs.stats.instantiations == 1


def test_host_statements_run_with_hooks_and_are_skipped_without():
    n = 300
    executor = scale_add(n)
    x = f32_input(n)
    hooks = Recorder()
    result = executor.run({"x": x}, {}, hooks)  # alpha defaults to 2.0
    [(name, dtype, value)] = hooks.printed
    assert (name, dtype) == ("y", DType.F32)
    np.testing.assert_array_equal(value, result["y"])
    np.testing.assert_array_equal(result["y"], expected_scale_add(x, 2.0))
    executor.run({"x": x}, {}, None)
    assert len(hooks.printed) == 1


def test_the_driver_can_rewrite_kernel_nodes_here():
    from cuvil_dsl.runtime.graph_nodes import driver

    assert driver() is not None  # on a GPU machine libcuda is present, so no rebinding re-captures


def test_new_scalar_value_updates_the_graph_in_place():
    n = 2048
    executor = scale_add(n)
    x = f32_input(n)
    executor.run({"x": x}, {"alpha": 1.5})
    runner = executor.graphs.get(executor.graphs.keys()[0])
    handle = runner.executable.graphExec
    out = executor.run({"x": x}, {"alpha": -3.0})
    np.testing.assert_array_equal(out["y"], expected_scale_add(x, -3.0))
    stats = executor.graphs.stats
    assert (stats.captures, stats.node_updates, stats.updates, stats.instantiations) == (1, 1, 0, 1)
    assert runner.executable.graphExec == handle


def test_rebinding_device_arrays_updates_the_graph_without_a_new_capture():
    import cupy

    n = 5000
    executor = scale_add(n)
    x0 = f32_input(n)
    executor.run({"x": x0}, {"alpha": 2.0})
    runner = executor.graphs.get(executor.graphs.keys()[0])
    handle = runner.executable.graphExec
    for seed in (1, 2, 3, 1):
        x = cupy.asarray(f32_input(n, seed))
        with executor.device:
            executor.bind_device("x", x)
            executor.execute()
            y = executor.fetch("y")
        np.testing.assert_array_equal(y, expected_scale_add(x.get(), 2.0))
    with executor.device:
        executor.execute()  # the same pointer again: replay only
        np.testing.assert_array_equal(executor.fetch("y"), expected_scale_add(x.get(), 2.0))
    stats = executor.graphs.stats
    assert stats.captures == 1 and stats.node_updates == 4  # never re-captured
    assert stats.updates == 0 and stats.instantiations == 1 and runner.executable.graphExec == handle
    np.testing.assert_array_equal(executor.arena.view("x").get(), x0)  # bound by pointer, never copied


def test_rebinding_falls_back_to_recapture_when_nodes_cannot_be_rewritten(monkeypatch):
    import cupy

    from cuvil_dsl.runtime import graphs

    monkeypatch.setattr(graphs, "kernel_nodes", lambda graph, kernels: None)
    n = 3000
    executor = scale_add(n)
    executor.run({"x": f32_input(n)}, {"alpha": 2.0})
    x = cupy.asarray(f32_input(n, 7))
    with executor.device:
        executor.bind_device("x", x)
        executor.execute()
        y = executor.fetch("y")
    np.testing.assert_array_equal(y, expected_scale_add(x.get(), 2.0))
    stats = executor.graphs.stats
    assert stats.captures == 2 and stats.node_updates == 0 and stats.updates + stats.instantiations == 2


def test_misaligned_device_array_is_copied_not_bound():
    import cupy

    n = 1000
    executor = scale_add(n)
    executor.run({"x": f32_input(n)}, {})
    backing = cupy.asarray(f32_input(n + 1, 5))
    shifted = backing[1:]  # 4 bytes past a 256-byte boundary
    with executor.device:
        executor.bind_device("x", shifted)
        executor.execute()
        y = executor.fetch("y")
    np.testing.assert_array_equal(y, expected_scale_add(shifted.get(), 2.0))
    np.testing.assert_array_equal(executor.arena.view("x").get(), shifted.get())
    assert executor.graphs.stats.captures == 1


def test_guard_bands_catch_a_kernel_writing_one_element_past_its_output():
    n = 1000  # the grid covers 1024 threads, so thread n exists and writes y[n]
    executor = scale_add(n, bias=BIAS_OVERRUN)
    with pytest.raises(RunFailure) as info:
        executor.run({"x": f32_input(n)}, {"alpha": 1.0})
    message = str(info.value)
    assert "guard bands damaged around `y`" in message
    assert "kernel `forward_k2` writes `y`" in message and "scale_add.cuvil:4:" in message
    assert executor.snapshot().damaged_guards() == ["y"]
    assert executor.check_guards() == ["y"]


FAULT_SCRIPT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("gpu_tests", {path!r})
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)
from cuvil_dsl.diagnostics import RunFailure
executor = tests.scale_add(512, bias=tests.BIAS_FAULT)
try:
    executor.run({{"x": tests.f32_input(512)}}, {{}})
except RunFailure as exc:
    print(exc)
    sys.exit(0)
sys.exit("no RunFailure")
"""


def test_a_faulting_kernel_is_reported_with_its_name_and_pipeline_line(tmp_path):
    script = tmp_path / "fault.py"
    script.write_text(FAULT_SCRIPT.format(path=str(THIS)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    message = done.stdout
    assert "scale_add.cuvil:4:" in message  # the line of `y = h + 1.0`
    assert "kernel `forward_k2` in graph `forward` failed" in message
    assert "illegal" in message.lower() and "context is lost" in message


def test_timing_returns_one_sample_per_execution():
    n = 1 << 20
    executor = scale_add(n)
    executor.run({"x": f32_input(n)}, {})
    timing = executor.time(warmup=3, iterations=25)
    assert timing.iterations == 25 and all(s > 0 for s in timing.samples_us)
    assert 0 < timing.p50_us <= timing.p99_us < 10_000


def test_kernel_reports_come_from_the_compile_service():
    executor = scale_add(256)
    reports = executor.kernel_reports()
    assert [r.name for r in reports] == ["forward_k1", "forward_k2"]
    assert all(r.registers and r.registers > 0 and r.spill_bytes == 0 for r in reports)
    assert all(isinstance(r.cache_hit, bool) and r.compile_ms is not None for r in reports)


def test_an_arena_larger_than_device_memory_is_refused_before_allocating():
    from cuvil_dsl.diagnostics import Span
    from cuvil_dsl.runtime.arena import DeviceArena
    from cuvil_dsl.runtime.layout import ArenaLayout, BufferSpec

    layout = ArenaLayout.build([BufferSpec("x", "input", DType.F32, (1 << 40,))])
    with pytest.raises(UserError) as info:
        DeviceArena(layout, Span.whole_file("big.cuvil"), "pipeline `big`")
    assert info.value.diagnostics[0].code == "E509" and "4096.00 GiB" in str(info.value)


@pytest.mark.parametrize("fill", ["driver", "cupy"])
def test_a_new_arena_is_canary_from_end_to_end_in_its_stream(fill, monkeypatch):
    """The arena's canary fill (cuMemsetD16Async, or CuPy's fill where the driver entry point cannot be bound) runs
    in the stream it is given, so a copy queued after it in that stream, a non-blocking one, lands on top of it."""
    import cupy

    from cuvil_dsl.diagnostics import Span
    from cuvil_dsl.runtime import arena
    from cuvil_dsl.runtime.layout import CANARY, ArenaLayout, BufferSpec

    if fill == "cupy":
        monkeypatch.setattr(arena, "_memset_d16_async", lambda: None)
    layout = ArenaLayout.build([BufferSpec("x", "input", DType.F32, (3, 1000)), BufferSpec("y", "output", DType.F16, (7,))])
    stream = cupy.cuda.Stream(non_blocking=True)
    a = arena.DeviceArena(layout, Span.whole_file("t.cuvil"), "pipeline `t`", stream)
    a.upload("x", np.ones((3, 1000), np.float32), stream)
    raw = a._bytes.get(stream=stream)
    stream.synchronize()
    x = layout.slot("x")
    assert raw.size == layout.total_bytes and raw.size % 2 == 0
    inside = np.zeros(raw.size, bool)
    inside[x.offset:x.end] = True
    assert (raw[inside].view(np.float32) == 1).all()
    assert (raw[~inside].reshape(-1, 2) == CANARY).all()
    assert not a.check_guards(stream)


def test_device_info():
    from cuvil_dsl.runtime.device import device_info, gpu_available, runs_on

    info = device_info(0)
    assert gpu_available() and info.arch.startswith("sm_") and info.sm_count > 0 and info.l2_bytes > 0
    assert runs_on(info.arch) and not runs_on("sm_75" if info.compute_capability[0] != 7 else "sm_90")


def _hand_made_api(executor, device_inputs: str = "bind"):
    """A CompiledPipeline serving a hand-made executor (the planner is not what these tests measure)."""
    from cuvil_dsl.api import Program

    program = Program(Path(executor.pipeline.span.file), None, executor.pipeline)
    compiled = program.compile(backend="cuda", device_inputs=device_inputs)
    compiled._executors[tuple(sorted(executor.sizes.items()))] = executor
    compiled._graphs = executor.graphs
    return compiled


def test_api_binds_cupy_arrays_by_pointer_and_returns_cupy():
    import cupy

    n = 4096
    compiled = _hand_made_api(scale_add(n))
    compiled.hooks = None
    x = cupy.asarray(f32_input(n))
    y = compiled(x, alpha=0.5)
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_array_equal(y.get(), expected_scale_add(x.get(), 0.5))
    first = y.get()
    x *= 2  # in place, on the caller's stream: the next call must see it
    y2 = compiled(x, alpha=0.5)
    np.testing.assert_array_equal(y2.get(), expected_scale_add(x.get(), 0.5))
    y3 = compiled(x, alpha=0.25)  # each call returns a new array ...
    np.testing.assert_array_equal(y3.get(), expected_scale_add(x.get(), 0.25))
    np.testing.assert_array_equal(y.get(), first)  # ... never into an array an earlier call returned
    np.testing.assert_array_equal(y2.get(), expected_scale_add(x.get(), 0.5))
    assert y3.data.ptr not in (y.data.ptr, y2.data.ptr)
    assert compiled.graphs.stats.captures == 1  # the same input array: no rebinding at all
    host = compiled(x.get(), alpha=0.5)  # NumPy in, NumPy out
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(y3.get(), expected_scale_add(x.get(), 0.25))  # the host call used the arena


def test_repeat_calls_take_the_short_path_on_the_callers_stream():
    import cupy

    n = 4096
    compiled = _hand_made_api(scale_add(n))
    compiled.hooks = None
    x = cupy.asarray(f32_input(n))
    y1 = compiled(x, alpha=0.5)
    assert compiled._last.repeat is not None  # bound by pointer, nothing copied: the short path is armed
    first = y1.get()
    x += 1  # in place, on the caller's stream
    y2 = compiled(x, alpha=0.5)
    np.testing.assert_array_equal(y2.get(), expected_scale_add(x.get(), 0.5))
    np.testing.assert_array_equal(y1.get(), first)  # a new array every call
    assert y2.data.ptr != y1.data.ptr
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # another caller stream: the work follows it, ordered after what was queued before
        x *= 3
        y3 = compiled(x, alpha=0.5)
        y3_host = y3.get(stream=stream)
    np.testing.assert_array_equal(y3_host, expected_scale_add(x.get(), 0.5))
    assert compiled.graphs.stats.captures == 1


def test_tma_gemm_reencodes_its_descriptors_when_inputs_are_rebound(tmp_path):
    """A Hopper GEMM loads tiles through TMA descriptors that hold the operands' pointers: a new
    caller array must re-encode them (and rewrite the graph's node), never read the old one."""
    import cupy

    import cuvil_dsl

    source = tmp_path / "gemm.cuvil"
    source.write_text("pipeline g(a: f16[M, K], b: f16[K, N]) -> y: f16[M, N] {\n"
                      "    graph forward {\n        y = relu(a @ b)\n    }\n}\n")
    compiled = cuvil_dsl.load(source).compile()
    rng = np.random.default_rng(11)
    pairs = [(cupy.asarray(rng.normal(scale=0.1, size=(384, 328)).astype(np.float16)),
              cupy.asarray(rng.normal(scale=0.1, size=(328, 520)).astype(np.float16))) for _ in range(3)]
    y = compiled(*pairs[0])
    (executor,) = compiled.executors.values()
    if not any(a.kind == "tensormap" for k in executor._rendered for a in k.args):
        pytest.skip("this GPU's GEMM does not load through TMA (sm_90 only)")
    for a, b in pairs[1:] + pairs[:1]:
        y = compiled(a, b)
        want = np.maximum(a.get().astype(np.float64) @ b.get().astype(np.float64), 0)
        np.testing.assert_allclose(y.get().astype(np.float64), want, rtol=2e-2, atol=2e-2)
    stats = compiled.graphs.stats
    assert stats.captures == 1 and stats.node_updates >= 3  # rewritten in place, not re-captured
    compiled.close()


@pytest.mark.parametrize("dynamic", [40 * 1024, 60 * 1024])
def test_a_kernel_whose_static_and_dynamic_shared_memory_pass_48_kb_launches(dynamic):
    """Without the opt-in a function may take 48 KB of shared memory in all: 16 KB static beside 40 KB dynamic
    (under 48 alone) needs it as much as 60 KB dynamic does; the loader asks for it (found in session 17, when a
    band of 43 KB dynamic and 11 KB static failed to launch with CUDA_ERROR_INVALID_VALUE)."""
    import cupy

    from cuvil_dsl.diagnostics import Span
    from cuvil_dsl.runtime.device import device_arch, max_dynamic_shared_bytes
    from cuvil_dsl.runtime.modules import ArgumentCells, load_kernels

    n = dynamic // 4
    source = textwrap.dedent(f"""
        extern "C" __global__ void cvl_through_shared(const float* __restrict__ x, float* __restrict__ y) {{
            extern __shared__ float dyn[];
            __shared__ float fixed[4096];  // 16 KB of static shared memory
            for (int i = threadIdx.x; i < {n}; i += blockDim.x) dyn[i] = x[i];
            for (int i = threadIdx.x; i < 4096; i += blockDim.x) fixed[i] = x[i] * 2.0f;
            __syncthreads();
            for (int i = threadIdx.x; i < {n}; i += blockDim.x) y[i] = dyn[{n} - 1 - i] + fixed[i % 4096];
        }}
    """)
    args = (KernelArg("buffer", "x", DType.F32, "const float* __restrict__"),
            KernelArg("buffer", "y", DType.F32, "float* __restrict__"))
    kernel = RenderedKernel("through_shared", "cvl_through_shared", source, (1, 1, 1), (256, 1, 1), dynamic, args, (),
                            None, Span("t.cuvil", 1, 1, 1, 2))
    (unit,) = compile_units([CompileUnit(kernel.entry, source, (kernel.entry,), ())], device_arch())
    assert unit.resources[kernel.entry].shared_bytes == 16 * 1024
    x = cupy.arange(n, dtype=cupy.float32)
    y = cupy.full(n, cupy.nan, dtype=cupy.float32)
    cells = ArgumentCells()
    cells.set_pointer("x", x.data.ptr)
    cells.set_pointer("y", y.data.ptr)
    loaded = load_kernels([kernel], [unit], cells, max_dynamic_shared_bytes())
    loaded["through_shared"].launch(cupy.cuda.get_current_stream().ptr)
    host = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(y.get(), host[::-1] + 2.0 * host[np.arange(n) % 4096])



def test_static_shared_memory_counts_toward_the_e503_limit():
    """Dynamic shared memory under the device's limit, but not beside 16 KB of static: E503, not a CUDA error."""
    from dataclasses import replace

    from cuvil_dsl.diagnostics import Span
    from cuvil_dsl.runtime.device import device_arch, max_dynamic_shared_bytes
    from cuvil_dsl.runtime.modules import ArgumentCells, load_kernels

    source = ('extern "C" __global__ void cvl_static(float* y) { extern __shared__ float dyn[]; __shared__ float '
              "fixed[4096]; fixed[threadIdx.x] = dyn[threadIdx.x]; __syncthreads(); y[threadIdx.x] = fixed[4095 - threadIdx.x]; }")
    args = (KernelArg("buffer", "y", DType.F32, "float*"),)
    limit = max_dynamic_shared_bytes()
    kernel = RenderedKernel("static", "cvl_static", source, (1, 1, 1), (128, 1, 1), limit - 8 * 1024, args, (), None,
                            Span("t.cuvil", 3, 5, 3, 9))
    (unit,) = compile_units([CompileUnit(kernel.entry, source, (kernel.entry,), ())], device_arch())
    cells = ArgumentCells()
    cells.set_pointer("y", 0)
    with pytest.raises(UserError) as err:
        load_kernels([kernel], [unit], cells, limit)
    (diag,) = err.value.diagnostics
    assert diag.code == "E503" and "16384 static" in diag.message and (diag.span.line, diag.span.column) == (3, 5)
    load_kernels([replace(kernel, shared_bytes=limit - 16 * 1024)], [unit], cells, limit)  # exactly the limit: loads


@pytest.mark.parametrize("device_inputs", ["bind", "copy"])
def test_api_copies_unbindable_device_arrays_on_every_call(device_inputs):
    import cupy

    n = 3000
    compiled = _hand_made_api(scale_add(n), device_inputs)
    compiled.hooks = None
    shifted = cupy.asarray(f32_input(n + 1, 9))[1:]  # misaligned: copied, never bound
    aligned = cupy.asarray(f32_input(n, 10))
    for x in (shifted, aligned):
        compiled(x)
        x *= 3  # in place: the fast path must copy it again
        np.testing.assert_array_equal(compiled(x).get(), expected_scale_add(x.get(), 2.0))
    stats = compiled.graphs.stats
    assert stats.captures == 1 and stats.instantiations == 1  # a new input pointer is a node rewrite


def test_api_on_torch_tensors():
    torch = pytest.importorskip("torch")
    n = 2048
    compiled = _hand_made_api(scale_add(n))
    compiled.hooks = None
    x = torch.randn(n, device="cuda")
    y = compiled(x)
    assert isinstance(y, torch.Tensor) and y.is_cuda
    torch.testing.assert_close(y, x * 2.0 + 1.0, rtol=0, atol=0)
    cpu = compiled(x.cpu())
    assert isinstance(cpu, torch.Tensor) and not cpu.is_cuda


@pytest.mark.alone
def test_api_overhead_against_a_raw_cupy_graph_replay():
    """An 8-kernel graph called through the API (CuPy in, CuPy out) within 1.25x of raw replay."""
    import cupy

    n = 1 << 20
    executor = chain(n)
    compiled = _hand_made_api(executor)
    x = cupy.asarray(f32_input(n))
    compiled(x)
    runner = executor.graphs.get(executor.graphs.keys()[0])
    stream = executor.stream
    calls = 2000

    def per_call(fn) -> float:
        for _ in range(50):
            fn()
        cupy.cuda.runtime.deviceSynchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        cupy.cuda.runtime.deviceSynchronize()
        return (time.perf_counter() - start) / calls

    raw = min(per_call(lambda: runner.executable.launch(stream)) for _ in range(3))
    api = min(per_call(lambda: compiled(x)) for _ in range(3))
    print(f"raw replay {raw * 1e6:.1f} us, API call {api * 1e6:.1f} us, ratio {api / raw:.2f}")
    assert api <= 1.25 * raw


# -- full stack: planner, renderer, compiler, runtime --------------------------------------------


@pytest.mark.parametrize("spec", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_spec_example_matches_the_reference(spec):
    from cuvil_dsl.driver import check_results, make_executor, open_spec

    session = open_spec(spec, backend="cuda")
    executor = make_executor(session)
    try:
        first = executor.run(session.inputs, session.binding.params, HostHooks())  # eager once, capture, replay
        comparisons, passed, _note = check_results(session, first)
        assert passed is not False, "\n".join(c.describe() for c in comparisons)
        assert executor.snapshot().damaged_guards() == []
        again = executor.run(session.inputs, session.binding.params)  # graphs replayed only
        for name, values in first.items():
            assert np.array_equal(values.view(np.uint8), again[name].view(np.uint8)), f"`{name}` changed on replay"
        assert executor.time(warmup=1, iterations=3).iterations == 3
    finally:
        executor.close()


def test_api_full_stack_on_numpy_and_cupy_with_graph_updates():
    import cupy

    import cuvil_dsl

    compiled = cuvil_dsl.load(SPECS / "softmax.cuvil").compile()
    assert compiled.backend == "cuda"
    x = np.random.default_rng(3).normal(size=(64, 256)).astype(np.float16)
    expected = execute(compiled.pipeline, {"x": x}, {})["y"]
    assert compare("y", compiled(x), expected, DType.F16, 1e-3, 1e-3).passed
    captures = compiled.graphs.stats.captures
    for seed in (4, 5):
        xd = cupy.asarray(np.random.default_rng(seed).normal(size=(64, 256)).astype(np.float16))
        y = compiled(xd)
        assert isinstance(y, cupy.ndarray)
        expected = execute(compiled.pipeline, {"x": xd.get()}, {})["y"]
        assert compare("y", y.get(), expected, DType.F16, 1e-3, 1e-3).passed
    assert compiled.graphs.stats.captures == captures  # new device arrays: node updates, no capture
    assert compiled.graphs.stats.node_updates >= 2 and compiled.graphs.stats.instantiations == 1
    compiled(np.zeros((32, 256), np.float16))  # another shape signature: another executor
    assert len(compiled.executors) == 2
    compiled.close()


WARM_SCRIPT = """
import json, time
import cupy
cupy.cuda.Device(0).use()
cupy.empty(1)  # the CUDA context is up before timing
started = time.perf_counter()
import cuvil_dsl.api
imported = time.perf_counter()
compiled = cuvil_dsl.api.load({spec!r}).compile()
loaded = time.perf_counter()
executor = compiled.executor({sizes!r})
built = time.perf_counter()
print(json.dumps({{"import_ms": (imported - started) * 1e3, "load_ms": (loaded - imported) * 1e3,
                   "build_ms": (built - loaded) * 1e3, "hits": [r.cache_hit for r in executor.kernel_reports()]}}))
"""


@pytest.mark.alone
def test_a_new_process_with_a_warm_cache_loads_a_pipeline_in_milliseconds(tmp_path):
    """Plan, render, compile (from the cache) and load the kernels of a pipeline in a fresh process."""
    script = tmp_path / "warm.py"
    script.write_text(WARM_SCRIPT.format(spec=str(SPECS / "softmax.cuvil"), sizes={"R": 512, "C": 1024}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def load_once() -> dict:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = load_once()
    warm = load_once()
    print(f"cold {cold}\nwarm {warm}")
    assert warm["hits"] and all(warm["hits"])
    assert warm["build_ms"] < 150


def test_sanitizer_finds_the_out_of_bounds_write(tmp_path):
    from cuvil_dsl.runtime.sanitize import find_sanitizer, sanitizer_command

    sanitizer = find_sanitizer()
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not installed")
    script = tmp_path / "overrun.py"
    script.write_text(textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("gpu_tests", {str(THIS)!r})
        tests = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tests)
        executor = tests.scale_add(1000, bias=tests.BIAS_FAR)
        try:
            executor.run({{"x": tests.f32_input(1000)}}, {{}})
        except Exception as exc:
            print(exc)
    """))
    command = sanitizer_command(sanitizer, "memcheck", str(tmp_path / "report.txt"), [])
    command = command[:command.index(sys.executable)] + [sys.executable, str(script)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CUVIL_LINEINFO": "1"})
    report = (tmp_path / "report.txt").read_text()
    assert done.returncode == 9, done.stdout + done.stderr + report
    assert "Invalid __global__ write" in report and "scale_add_forward_k2" in report


@pytest.mark.parametrize("sizes,clusters", [((384, 520, 3072), False), ((256, 512, 4096), True)])
def test_split_k_gemm_in_a_graph_is_exact_on_every_call(sizes, clusters, tmp_path):
    """A GEMM with few tiles and a deep K splits K over CTAs that meet through the kernel's workspace
    (cuda_wgmma.SPLIT_K; 15 tiles in 3 parts, or 8 tiles in 4 parts as clusters of two whose half-tile sums
    meet there): replayed from a graph, rebound to new inputs, called again, every result matches float64,
    the same inputs give the same bits on every call (the partials are added in a fixed order), and the
    counters are back to 0 after each call, ready for the next."""
    import cupy

    import cuvil_dsl

    source = tmp_path / "split.cuvil"
    source.write_text("pipeline g(a: f16[M, K], b: f16[K, N], bias: f16[N]) -> y: f16[M, N] {\n"
                      "    graph forward {\n        y = gelu(a @ b + bias)\n    }\n}\n")
    compiled = cuvil_dsl.load(source).compile()
    rng = np.random.default_rng(5)

    def inputs(m, n, k):
        return [cupy.asarray(rng.normal(scale=0.05, size=shape).astype(np.float16))
                for shape in ((m, k), (k, n), (n,))]

    first = inputs(*sizes)
    y = compiled(*first)
    (executor,) = compiled.executors.values()
    if not any(a.kind == "workspace" for k in executor._rendered for a in k.args):
        pytest.skip("this GPU's GEMM is not split along K (sm_90 only)")
    assert any("__cluster_dims__(2, 1, 1)" in k.source for k in executor._rendered) == clusters
    ((ptr, nbytes),) = executor._cells.workspaces().values()
    memory = cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, nbytes, None), 0)
    counters = cupy.ndarray((64,), cupy.uint32, memory)  # the counters' 256 bytes (15 or 16 used), then padding
    bits = y.get().view(np.uint16).copy()
    for args in [inputs(*sizes), first, first]:
        y = compiled(*args)
        a, b, bias = (x.get().astype(np.float64) for x in args)
        z = a @ b + bias
        want = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2)))
        np.testing.assert_allclose(y.get().astype(np.float64), want, rtol=1e-2, atol=1e-2)
        assert not counters.get().any()
    assert (y.get().view(np.uint16) == bits).all()  # same inputs, same bits
    assert compiled.graphs.stats.captures == 1
    compiled.close()
    assert executor._cells.workspaces() == {}
