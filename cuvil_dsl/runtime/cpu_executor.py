"""The CPU backend: one pipeline instance (one shape signature) executed by numba kernels.

Every buffer of the plan lives in a :class:`HostArena` with the GPU arena's layout, digests and
guard bands, so the regression harness treats both backends alike; kernels receive flat views
of the arena (f16 and bf16 as uint16 bit patterns), so a kernel writing past a buffer damages
that buffer's guard band, as on the GPU, and ``run`` reports it.

An execution: host arrays are copied into the arena, scalar parameters become uniform values
(``plan.host_ops``, only when they changed), then the steps run in program order: kernels are
called, a graph's kernels are called in order (there is nothing to capture on the CPU), host
statements read the arena and call the hooks. Kernels are synchronous, so ``sync`` has nothing
to wait for.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from cuvil_dsl.codegen.cpu import Param, render_cpu
from cuvil_dsl.diagnostics import InternalError, RunFailure, Span
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.plan import FusionPlan, GraphStep, HostStep, Launch
from cuvil_dsl.reference.executor import HostHooks
from cuvil_dsl.runtime import numba_light
from cuvil_dsl.runtime.base import (
    Executor,
    KernelReport,
    Snapshot,
    Target,
    Timing,
    perform_host_statement,
    time_on_host,
)
from cuvil_dsl.runtime.binding import check_host_inputs, evaluate_uniforms, resolve_params
from cuvil_dsl.runtime.cpu_modules import LoadedModule, ModuleDirectory, load_module
from cuvil_dsl.runtime.host_arena import HostArena
from cuvil_dsl.runtime.layout import ArenaLayout
from cuvil_dsl.types import DType

# the NumPy scalar type a uniform is passed as (the kernels' explicit signatures accept no
# other); f16/bf16 uniforms are already rounded to their dtype, so f32 holds them exactly
_UNIFORM_TYPE = {DType.F16: np.float32, DType.BF16: np.float32, DType.F32: np.float32, DType.F64: np.float64,
                 DType.I32: np.int32, DType.BOOL: np.bool_}


class _Kernel:
    """A loaded kernel and its arguments: arena views and workspaces fixed, uniforms per parameters."""

    def __init__(self, loaded: LoadedModule, arena: HostArena):
        self.loaded = loaded
        params = loaded.module.params
        self.buffers = tuple(_flat_storage(arena.view(p.name), p.dtype) if p.kind == "buffer" else
                             np.empty(p.size, dtype=p.dtype.numpy) for p in params if p.kind != "scalar")
        self.scalars: tuple[Param, ...] = tuple(p for p in params if p.kind == "scalar")
        self.args: tuple = ()
        self.call: Callable = loaded.entry  # the dispatcher, or its compiled function (set_uniforms)

    def set_uniforms(self, uniforms: Mapping[str, object]) -> None:
        values = tuple(_UNIFORM_TYPE[p.dtype](uniforms[p.name]) for p in self.scalars)
        self.args = self.buffers + values
        self.call = _compiled_entry(self.loaded.entry, self.args)

    def __call__(self) -> None:
        self.call(*self.args)


def _compiled_entry(dispatcher, args: tuple) -> Callable:
    """The compiled function the dispatcher would call for ``args``, or the dispatcher itself.

    A kernel has one explicit signature, and its arguments never change type: the dispatcher
    would type every argument of every call to choose that one overload (the first call
    through ``typeof``, which imports ``numpy.ma`` to reject masked arrays: 10 ms of a warm
    start). When ``args`` have exactly the signature's types, typed as numba's ``typeof``
    does, the overload's entry point is called directly, the same function the dispatcher
    calls; anything else (another type, an array subclass, another numba) keeps the
    dispatcher, which converts or rejects as always.
    """
    try:
        from numba.core import types
        from numba.np import numpy_support

        (overload,) = dispatcher.overloads.values()
        expected = tuple(overload.signature.args)
        entry = overload.entry_point
        if len(args) != len(expected) or overload.objectmode or not callable(entry):
            return dispatcher
        for arg, want in zip(args, expected):
            if type(arg) is np.ndarray:  # as numba's _typeof_ndarray (no subclass reaches here)
                got = types.Array(numpy_support.from_dtype(arg.dtype), arg.ndim, numpy_support.map_layout(arg),
                                  readonly=not arg.flags.writeable)
            elif isinstance(arg, np.generic):
                got = numpy_support.map_arrayscalar_type(arg)
            else:
                return dispatcher
            if got != want:
                return dispatcher
        return entry
    except Exception:  # whatever numba this is, the dispatcher is always right
        return dispatcher


def _flat_storage(view: np.ndarray, dtype: DType) -> np.ndarray:
    """The buffer as the kernels see it: flat, half types as their uint16 bit patterns."""
    flat = view.reshape(-1)
    return flat.view(np.uint16) if dtype in (DType.F16, DType.BF16) else flat


class CpuExecutor(Executor):
    backend = "cpu"

    def __init__(self, pipeline: ir.Pipeline, plan: FusionPlan, sizes: Mapping[str, int], target: Target,
                 modules: list[LoadedModule], directory: ModuleDirectory):
        """Allocate the arena and bind every kernel's arguments; nothing runs yet."""
        self.pipeline, self.plan, self.target = pipeline, plan, target
        self.sizes = dict(sizes)
        self.layout = ArenaLayout.for_plan(plan, self.sizes)
        self.arena = HostArena(self.layout)
        self._directory = directory
        self._modules = modules
        kernels = {m.module.name: _Kernel(m, self.arena) for m in modules}
        self._steps: list[_Kernel | HostStep] = []
        for step in plan.steps:
            if isinstance(step, Launch):
                self._steps.append(kernels[step.kernel.name])
            elif isinstance(step, GraphStep):
                self._steps.extend(kernels[launch.kernel.name] for launch in step.launches)
            else:
                self._steps.append(step)
        self._params: dict[str, object] | None = None
        self._uniforms: dict[str, object] = {}

    @classmethod
    def build(cls, pipeline: ir.Pipeline, plan: FusionPlan, sizes: Mapping[str, int],
              target: Target) -> "CpuExecutor":
        """Render the plan for ``sizes`` and load every kernel (numba compiles it, or loads its cache)."""
        directory = ModuleDirectory()
        try:
            with numba_light.first_import():  # the whole first build, when it imports numba
                modules = [load_module(m, directory.path)
                           for m in render_cpu(plan, dict(sizes), fast_math=target.fast_math)]
        except BaseException:
            directory.close()
            raise
        return cls(pipeline, plan, sizes, target, modules, directory)

    # -- execution ----------------------------------------------------------------------------

    def run(self, inputs: dict[str, np.ndarray], params: dict[str, object],
            hooks: HostHooks | None = None) -> dict[str, np.ndarray]:
        check_host_inputs(self.pipeline, self.sizes, inputs)
        for param in self.pipeline.tensor_params:
            self.arena.upload(param.name, inputs[param.name])
        self.set_params(resolve_params(self.pipeline, params))
        self.execute(hooks)
        damaged = self.arena.check_guards()
        if damaged:
            raise RunFailure(self._guard_message(damaged))
        return {r.name: self.arena.download(r.name) for r in self.pipeline.results}

    def set_params(self, params: Mapping[str, object]) -> None:
        """Evaluate the uniforms for resolved scalar ``params`` (only when they changed)."""
        if params != self._params:
            self._uniforms = evaluate_uniforms(self.plan, params)
            for step in self._steps:
                if isinstance(step, _Kernel):
                    step.set_uniforms(self._uniforms)
            self._params = dict(params)

    def execute(self, hooks: HostHooks | None = None) -> None:
        """One execution over the arena as it stands (host statements when ``hooks`` are given and active)."""
        active = hooks is not None and not hooks.skip
        for step in self._steps:
            if isinstance(step, _Kernel):
                step()
            elif active:
                self._host(step.stmt, hooks)

    def _host(self, stmt: ir.HostStmt, hooks: HostHooks) -> None:
        perform_host_statement(stmt, hooks, self._host_value)  # kernels return when their work is done

    def _host_value(self, name: str, span: Span) -> tuple[np.ndarray, DType]:
        if name in self.layout:
            return self.arena.download(name), self.layout.slot(name).dtype
        if name in self._uniforms:
            return np.asarray(self._uniforms[name]), DType.F64
        raise InternalError(f"{span}: host statement reads `{name}`, which the plan keeps in no buffer")

    def _guard_message(self, damaged: list[str]) -> str:
        writers = [f"{k.span}: kernel `{k.name}` writes `{name}`"
                   for name in damaged for k in self.plan.kernels if name in k.outputs]
        return "\n".join([f"guard bands damaged around {', '.join(f'`{n}`' for n in damaged)}: "
                          "a kernel wrote outside its buffer", *writers])

    # -- timing, snapshot, reports --------------------------------------------------------------

    def time(self, warmup: int, iterations: int) -> Timing:
        """The host clock around each whole execution, host statements skipped."""
        if self._params is None:
            raise InternalError("time() needs a run() first: the arena holds no inputs yet")
        return time_on_host(self.execute, warmup, iterations)

    def snapshot(self) -> Snapshot:
        return self.arena.snapshot(self.backend)

    def check_guards(self) -> list[str]:
        return self.arena.check_guards()

    def kernel_reports(self) -> list[KernelReport]:
        import numba

        return [KernelReport(name=m.module.name, cache_hit=m.cache_hit, compile_ms=m.compile_ms,
                             compiler=f"numba {numba.__version__}") for m in self._modules]

    def sources(self) -> dict[str, str]:
        return {m.module.file_name: m.module.source for m in self._modules}

    def toolchain(self) -> dict[str, str]:
        import llvmlite
        import numba
        from llvmlite import binding

        return {"backend": self.backend, "numba": numba.__version__, "llvmlite": llvmlite.__version__,
                "numpy": np.__version__, "cpu": binding.get_host_cpu_name(),
                "threads": str(numba.get_num_threads())}

    def close(self) -> None:
        """Drop the kernels and the arena; a private module directory is removed."""
        self._steps.clear()
        self._modules = []
        self._directory.close()
