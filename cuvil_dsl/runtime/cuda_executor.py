"""The GPU backend: one pipeline instance (one shape signature) executed through CuPy.

How an execution flows:

1. Inputs are bound: host arrays are copied into the arena; caller-owned CuPy arrays (through
   the Python API) are either bound by pointer (the kernels read the caller's memory; graphs are
   updated in place) or copied device to device.
2. Scalar parameters are turned into uniform values by evaluating ``plan.host_ops`` on the host
   (only when they changed) and stored into the kernels' argument cells.
3. Steps run in program order on the *work stream*: eager kernels are launched, graphs are
   replayed (the first time: eager run, capture, upload), host statements synchronise the stream,
   read the value and call the hooks.
4. Results are read back (or copied device to device for device callers).

The work stream is the executor's own non-blocking stream for ``run`` and ``time``; the Python API
switches it to the caller's stream (CuPy's or PyTorch's current one), so the pipeline is ordered
with the caller's work at no cost: no events, no waits. Switching streams makes the new stream
wait for everything queued on the old one, so the arena is never used by two streams at once.
Captures always happen on the executor's own stream (the legacy default stream cannot capture).

The first execution is *checked*: it waits after every kernel, so a fault names exactly the
kernel and its pipeline line, and it ends with a guard-band check of the whole arena. Later
executions only queue work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from cuvil_dsl.diagnostics import InternalError, RunFailure, Span, UserError, error
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.plan import FusionPlan, GraphStep, HostStep, Launch
from cuvil_dsl.reference.executor import HostHooks
from cuvil_dsl.runtime.arena import DeviceArena
from cuvil_dsl.runtime.base import Executor, KernelReport, Snapshot, Target, Timing, perform_host_statement
from cuvil_dsl.runtime.binding import check_host_inputs, evaluate_uniforms, resolve_params
from cuvil_dsl.runtime.device import device_arch, max_dynamic_shared_bytes, runs_on
from cuvil_dsl.runtime.faults import cuda_error_types, is_sticky, kernel_failure
from cuvil_dsl.runtime.graphs import GraphCache, GraphRunner
from cuvil_dsl.runtime.layout import ArenaLayout
from cuvil_dsl.runtime.modules import ArgumentCells, LoadedKernel, load_kernels
from cuvil_dsl.types import DType

if TYPE_CHECKING:
    from cuvil_dsl.codegen.artifact import RenderedKernel
    from cuvil_dsl.compile.units import CompiledUnit

Step = LoadedKernel | GraphRunner | HostStep


class CudaExecutor(Executor):
    backend = "cuda"

    def __init__(self, pipeline: ir.Pipeline, plan: FusionPlan, sizes: Mapping[str, int], target: Target,
                 kernels: Sequence[RenderedKernel], units: Sequence[CompiledUnit], *,
                 graphs: GraphCache | None = None, use_graphs: bool = True):
        """Allocate the arena, load every kernel and lay out the steps; nothing runs yet.

        ``use_graphs=False`` launches the kernels of graph blocks eagerly (to compare replay with
        eager execution); ``graphs`` is the program-wide graph cache to register graphs in.
        """
        import cupy

        self.pipeline, self.plan, self.target = pipeline, plan, target
        self.sizes = dict(sizes)
        self.graphs = graphs if graphs is not None else GraphCache()
        self.device = cupy.cuda.Device(target.device)
        # fetch_device_on's calls, bound once (it runs on every API call)
        self._new_array, self._memcpy = cupy.ndarray, cupy.cuda.runtime.memcpyAsync
        self._device_to_device = cupy.cuda.runtime.memcpyDeviceToDevice
        self._rendered = tuple(kernels)
        self._units = tuple(units)
        with self.device:
            self.layout = ArenaLayout.for_plan(plan, self.sizes)
            self.stream = cupy.cuda.Stream(non_blocking=True)
            # the canary fill in this stream's order, ahead of every upload and launch (a non-blocking stream
            # does not wait for work on the legacy default stream)
            self.arena = DeviceArena(self.layout, pipeline.span, f"pipeline `{pipeline.name}`", self.stream)
            self._work = self.stream
            self._switched = cupy.cuda.Event(disable_timing=True)
            self._cells = ArgumentCells()
            for slot in self.layout.slots:
                self._cells.set_pointer(slot.name, self.arena.pointer(slot.name))
            self._loaded = load_kernels(self._rendered, self._units, self._cells, max_dynamic_shared_bytes(target.device))
            self._check_arguments()
            self._graph_of: dict[str, str] = {}
            self._steps: list[Step] = self._lay_out(use_graphs)
        self._current = {s.name: self.arena.view(s.name) for s in self.layout.slots}  # what each name reads now
        self._params: dict | None = None
        self._uniforms: dict[str, object] = {}
        self._checked = True  # the next execution is the first: wait after each kernel, check guards
        self._has_inputs = False
        self._last: tuple[LoadedKernel, bool] | None = None  # last kernel launched, and whether it was waited on
        self._lost: str | None = None

    @classmethod
    def build(cls, pipeline: ir.Pipeline, plan: FusionPlan, sizes: Mapping[str, int], target: Target, *,
              graphs: GraphCache | None = None, use_graphs: bool = True) -> "CudaExecutor":
        """Render the plan for ``sizes``, compile every kernel (in parallel, cached) and load it."""
        from cuvil_dsl.codegen import render_cuda
        from cuvil_dsl.compile import CompileUnit, compile_units

        arch = target.arch or device_arch(target.device)
        if not runs_on(arch, target.device):
            message = f"kernels built for {arch} cannot run on GPU {target.device} ({device_arch(target.device)})"
            raise UserError([error("E504", message, pipeline.span, hint="leave arch as auto")])
        kernels = render_cuda(plan, dict(sizes), arch, fast_math=target.fast_math, tf32=target.tf32)
        units = compile_units(  # one unit per kernel, named like `cuvil-dsl compile`'s, so they share the cache
            [CompileUnit(k.name, k.source, (k.entry,), tuple(k.options)) for k in kernels], arch,
            compiler=target.compiler, fallback=target.fallback, fast_math=target.fast_math, options=target.options,
        )
        return cls(pipeline, plan, sizes, target, kernels, units, graphs=graphs, use_graphs=use_graphs)

    # -- layout -------------------------------------------------------------------------------

    def _check_arguments(self) -> None:
        for kernel in self._rendered:
            for arg in kernel.args:
                if arg.kind == "buffer" and arg.name not in self.layout:
                    raise InternalError(f"kernel `{kernel.name}` takes buffer `{arg.name}`, which the plan does not hold")

    def _lay_out(self, use_graphs: bool) -> list[Step]:
        steps: list[Step] = []
        for step in self.plan.steps:
            if isinstance(step, Launch):
                steps.append(self._kernel(step.kernel.name))
            elif isinstance(step, GraphStep):
                kernels = [self._kernel(launch.kernel.name) for launch in step.launches]
                for kernel in kernels:
                    self._graph_of[kernel.name] = step.name
                if not use_graphs:
                    steps.extend(kernels)
                    continue
                key = GraphCache.key(self.pipeline.name, self.sizes, step.name)
                runner = GraphRunner(step.name, step.span, kernels, self._cells, self.stream, self.graphs.stats)
                self.graphs.add(key, runner)
                steps.append(runner)
            else:
                steps.append(step)
        return steps

    def _kernel(self, name: str) -> LoadedKernel:
        try:
            return self._loaded[name]
        except KeyError:
            raise InternalError(f"the plan launches kernel `{name}`, which was not rendered") from None

    # -- binding ------------------------------------------------------------------------------

    def bind_host(self, name: str, array: np.ndarray) -> None:
        """Copy a host array of the buffer's declared dtype into the arena."""
        self.arena.upload(name, array, self._work)
        self._use_arena(name)

    def bind_device(self, name: str, array, copy: bool = False) -> bool:
        """Use a caller's CuPy array (storage dtype, the buffer's shape) as input ``name``.

        Bound by pointer when it is C-contiguous and 256-byte aligned like an arena buffer
        (kernels may use wide vector loads), and ``copy`` is False; otherwise copied into the
        arena on the work stream. A bound array is kept alive until another one replaces it.
        Returns whether it was bound by pointer (a copied array must be copied again when its
        contents change).
        """
        aligned = array.data.ptr % self.layout.alignment == 0
        bound = not copy and aligned and array.flags.c_contiguous
        if bound:
            self._cells.set_pointer(name, array.data.ptr)
            self._current[name] = array
            self._has_inputs = True
        else:
            self.arena.copy_from_device(name, array, self._work)
            self._use_arena(name)
        return bound

    def _use_arena(self, name: str) -> None:
        self._cells.set_pointer(name, self.arena.pointer(name))
        self._current[name] = self.arena.view(name)
        self._has_inputs = True

    def set_params(self, params: Mapping[str, object]) -> None:
        """Evaluate the uniforms for resolved scalar ``params`` (only when they changed)."""
        if params != self._params:
            self._uniforms = evaluate_uniforms(self.plan, params)
            self._cells.set_uniforms(self._uniforms)
            self._params = dict(params)

    def use_stream(self, stream) -> None:
        """Queue the following work on ``stream``, after everything queued so far on the previous one."""
        if stream.ptr != self._work.ptr:
            self._switched.record(self._work)
            stream.wait_event(self._switched)
            self._work = stream

    # -- execution ----------------------------------------------------------------------------

    def run(self, inputs: dict[str, np.ndarray], params: dict[str, object],
            hooks: HostHooks | None = None) -> dict[str, np.ndarray]:
        with self.device:
            self._ensure_usable()
            self.use_stream(self.stream)
            check_host_inputs(self.pipeline, self.sizes, inputs)
            for param in self.pipeline.tensor_params:
                self.bind_host(param.name, inputs[param.name])
            self.set_params(resolve_params(self.pipeline, params))
            self.execute(hooks)
            return {r.name: self.fetch(r.name) for r in self.pipeline.results}

    def execute(self, hooks: HostHooks | None = None) -> None:
        """Queue one execution of every step (host statements when ``hooks`` are given and active)."""
        self._ensure_usable()
        checked = self._checked
        active = hooks is not None and not hooks.skip
        try:
            for step in self._steps:
                if isinstance(step, LoadedKernel):
                    self._launch(step, checked)
                elif isinstance(step, GraphRunner):
                    self._replay(step, checked)
                elif active:
                    self._host(step.stmt, hooks)
            if checked:
                self._after_first_execution()
        except cuda_error_types() as exc:
            raise self._failure(exc) from None

    def _launch(self, kernel: LoadedKernel, checked: bool) -> None:
        self._last = (kernel, checked)
        kernel.launch(self._work.ptr)
        if checked:
            self._work.synchronize()

    def _replay(self, runner: GraphRunner, checked: bool) -> None:
        if not runner.captured:
            for kernel in runner.kernels:  # eager once: modules warm, faults pinned to one kernel
                self._launch(kernel, True)
            runner.capture(self._work)
        self._last = (runner.kernels[-1], False)
        runner.launch(self._work)
        if checked:
            self._work.synchronize()

    def _after_first_execution(self) -> None:
        self._work.synchronize()
        damaged = self.arena.check_guards(self._work)
        if damaged:
            raise RunFailure(self._guard_message(damaged))
        self._checked = False

    def _guard_message(self, damaged: list[str]) -> str:
        writers = [f"{k.span}: kernel `{k.name}` writes `{name}`"
                   for name in damaged for k in self.plan.kernels if name in k.outputs]
        lines = [f"guard bands damaged around {', '.join(f'`{n}`' for n in damaged)}: "
                 "a kernel wrote outside its buffer", *writers]
        return "\n".join(lines)

    def _host(self, stmt: ir.HostStmt, hooks: HostHooks) -> None:
        self._work.synchronize()
        perform_host_statement(stmt, hooks, self._host_value)

    def _host_value(self, name: str, span: Span) -> tuple[np.ndarray, DType]:
        if name in self.layout:
            return self.fetch(name), self.layout.slot(name).dtype
        if name in self._uniforms:
            return np.asarray(self._uniforms[name]), DType.F64
        raise InternalError(f"{span}: host statement reads `{name}`, which the plan keeps in no buffer")

    def _failure(self, exc: BaseException) -> RunFailure:
        if self._last is None:
            return RunFailure(f"{self.pipeline.span}: pipeline `{self.pipeline.name}` failed on the GPU: {exc}")
        kernel, exact = self._last
        note = None if exact else "the last kernel launched before the error surfaced; it may lie in an earlier one"
        failure = kernel_failure(exc, kernel.kernel, self._graph_of.get(kernel.name), note)
        if is_sticky(exc):
            self._lost = str(failure)
        return failure

    def _ensure_usable(self) -> None:
        if self._lost is not None:
            raise RunFailure(f"the GPU context was lost by an earlier fault; restart the process. {self._lost}")

    # -- results ------------------------------------------------------------------------------

    def fetch(self, name: str) -> np.ndarray:
        """Buffer ``name`` as a host array of its declared dtype (waits for the work stream)."""
        slot = self.layout.slot(name)
        try:
            host = self._current[name].get(stream=self._work)
        except cuda_error_types() as exc:
            raise self._failure(exc) from None
        return host.view(slot.dtype.numpy) if slot.dtype is DType.BF16 else host

    def fetch_device(self, name: str):
        """A new CuPy array holding buffer ``name`` (storage dtype), copied on the work stream.

        Allocated from CuPy's pool on the work stream, so the pool reuses its memory in that
        stream's order.
        """
        import cupy

        work = self._work
        if cupy.cuda.get_current_stream().ptr == work.ptr:  # the API's device callers: already current
            return self.fetch_device_on(name, work)
        with work:
            return self.fetch_device_on(name, work)

    def fetch_device_on(self, name: str, current):
        """:meth:`fetch_device` when ``current``, the current stream, is the work stream (the API's
        repeat path, after :meth:`use_stream`)."""
        source = self._current[name]
        out = self._new_array(source.shape, source.dtype)
        self._memcpy(out.data.ptr, source.data.ptr, source.nbytes, self._device_to_device, current.ptr)
        return out

    def synchronize(self) -> None:
        try:
            self._work.synchronize()
        except cuda_error_types() as exc:
            raise self._failure(exc) from None

    # -- timing, snapshot, reports --------------------------------------------------------------

    def time(self, warmup: int, iterations: int) -> Timing:
        """CUDA events around each whole execution (graphs replayed, eager kernels launched)."""
        import cupy

        if not self._has_inputs:
            raise InternalError("time() needs a run() first: the arena holds no inputs yet")
        with self.device:
            self._ensure_usable()
            self.use_stream(self.stream)
            device_steps = [s for s in self._steps if not isinstance(s, HostStep)]
            events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(iterations)]
            try:
                for _ in range(warmup):
                    self._queue(device_steps)
                for start, end in events:
                    start.record(self.stream)
                    self._queue(device_steps)
                    end.record(self.stream)
                self.stream.synchronize()
            except cuda_error_types() as exc:
                raise self._failure(exc) from None
            return Timing(tuple(cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events))

    def _queue(self, steps: list[Step]) -> None:
        for step in steps:
            if isinstance(step, LoadedKernel):
                self._launch(step, False)
            else:
                self._replay(step, False)

    def snapshot(self) -> Snapshot:
        with self.device:
            self.synchronize()
            return self.arena.snapshot(self.backend, self._work)

    def check_guards(self) -> list[str]:
        with self.device:
            self.synchronize()
            return self.arena.check_guards(self._work)

    def kernel_reports(self) -> list[KernelReport]:
        by_entry = {entry: unit for unit in self._units for entry in unit.unit.kernels}
        reports = []
        for kernel in self._rendered:
            unit = by_entry[kernel.entry]
            res = unit.resources.get(kernel.entry)
            reports.append(KernelReport(
                name=kernel.name,
                registers=res.registers if res else None,
                spill_bytes=res.spill_bytes if res else None,
                shared_bytes=(res.shared_bytes if res else 0) + kernel.shared_bytes,
                cache_hit=unit.cache_hit,
                compile_ms=unit.compile_ms,
                compiler=unit.compiler,
            ))
        return reports

    def sources(self) -> dict[str, str]:
        return {f"{kernel.name}.cu": kernel.source for kernel in self._rendered}

    def toolchain(self) -> dict[str, str]:
        from cupy.cuda import runtime

        from cuvil_dsl.runtime.device import device_info

        compilers = sorted({f"{u.compiler} {u.compiler_version}" for u in self._units})
        gpu = device_info(self.target.device)
        return {
            "backend": self.backend,
            "arch": str(self.target.arch),
            "compiler": ", ".join(compilers),
            "gpu": gpu.name,
            "driver": str(runtime.driverGetVersion()),
        }

    def close(self) -> None:
        with self.device:
            if self._lost is None:
                self._work.synchronize()
            self.graphs.evict(self.pipeline.name, self.sizes)
            self._steps.clear()
            self._loaded.clear()
            self._current.clear()
            self.arena.release()
            self._cells.release()
