"""The reference backend: the float64 NumPy interpreter behind the same Executor interface.

It keeps its inputs and results in a :class:`HostArena` so ``snapshot`` and guard checks mean the
same as on the other backends (it has no intermediates in memory: values live in the
interpreter's environment). Timing uses the host clock: there is no device to time.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.plan import FusionPlan
from cuvil_dsl.reference.executor import HostHooks, execute
from cuvil_dsl.runtime.base import Executor, Snapshot, Target, Timing, time_on_host
from cuvil_dsl.runtime.binding import check_host_inputs, resolve_params
from cuvil_dsl.runtime.host_arena import HostArena
from cuvil_dsl.runtime.layout import ArenaLayout, BufferSpec
from cuvil_dsl.types import concrete_shape


class ReferenceExecutor(Executor):
    backend = "reference"

    def __init__(self, pipeline: ir.Pipeline, sizes: Mapping[str, int]):
        self.pipeline = pipeline
        self.sizes = dict(sizes)
        buffers = [BufferSpec(p.name, "input", p.type.dtype, concrete_shape(p.type.shape, self.sizes))
                   for p in pipeline.tensor_params]
        buffers += [BufferSpec(r.name, "result", r.type.dtype, concrete_shape(r.type.shape, self.sizes))
                    for r in pipeline.results]
        self.arena = HostArena(ArenaLayout.build(buffers))
        self._params: dict[str, object] | None = None

    @classmethod
    def build(cls, pipeline: ir.Pipeline, plan: FusionPlan | None, sizes: Mapping[str, int],
              target: Target) -> "ReferenceExecutor":
        """Same factory signature as the compiled backends; the reference needs no plan or target."""
        return cls(pipeline, sizes)

    def run(self, inputs: dict[str, np.ndarray], params: dict[str, object],
            hooks: HostHooks | None = None) -> dict[str, np.ndarray]:
        check_host_inputs(self.pipeline, self.sizes, inputs)
        for param in self.pipeline.tensor_params:
            self.arena.upload(param.name, inputs[param.name])
        self._params = resolve_params(self.pipeline, params)
        self._execute(hooks)
        return {r.name: self.arena.download(r.name) for r in self.pipeline.results}

    def _execute(self, hooks: HostHooks | None) -> None:
        inputs = {p.name: self.arena.view(p.name) for p in self.pipeline.tensor_params}
        results = execute(self.pipeline, inputs, self._params, hooks)
        for name, value in results.items():
            self.arena.upload(name, value)

    def time(self, warmup: int, iterations: int) -> Timing:
        if self._params is None:
            raise InternalError("time() needs a run() first: the arena holds no inputs yet")
        return time_on_host(lambda: self._execute(None), warmup, iterations)

    def snapshot(self) -> Snapshot:
        return self.arena.snapshot(self.backend)

    def check_guards(self) -> list[str]:
        return self.arena.check_guards()
