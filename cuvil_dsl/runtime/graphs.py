"""CUDA Graphs exactly where the program declared ``graph NAME { ... }``.

Life of one graph (:class:`GraphRunner`): the executor runs its kernels eagerly once (modules
loaded, caches warm, faults attributed to one kernel), then the runner captures them on the
executor's own non-blocking stream, instantiates the graph and uploads it on the stream that
will launch it, and from then on each execution is one ``cudaGraphLaunch`` on whichever stream
the executor works on.

Capture runs in *thread-local* mode: a forbidden call made by this thread while capturing (an
allocation, a synchronisation) invalidates the capture and is reported, instead of being silently
left out of the graph as relaxed mode would allow, and other threads' allocations (another
library's memory pool) cannot invalidate it as they could in global mode.

Kernel arguments are baked into a graph when it is captured. When an argument cell changes (an
input rebound to a caller's device array, a scalar parameter with a new value), the runner
rewrites the parameters of the kernel nodes whose arguments changed, in place, with
``cuGraphExecKernelNodeSetParams`` (:mod:`~cuvil_dsl.runtime.graph_nodes`): no re-capture, no
new graph, no instantiation, no upload. Only where that path is unavailable or refused does it
capture the kernels again and apply the new graph to the executable one with
``cudaGraphExecUpdate`` (through cuda-bindings); where that too is refused or impossible, the
freshly captured graph replaces the old one. Updates take effect at the next launch; launches
already queued are unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.runtime.faults import cuda_error_types, kernel_failure
from cuvil_dsl.runtime.graph_nodes import KernelNodes, kernel_nodes
from cuvil_dsl.runtime.modules import ArgumentCells, LoadedKernel

GraphKey = tuple[str, tuple[tuple[str, int], ...], str]  # (pipeline, sorted sizes, graph name)


@dataclass
class GraphStats:
    """How much graph work was done, for tests and reports."""

    captures: int = 0  # stream captures (the first, then one per argument change the nodes could not take)
    node_updates: int = 0  # argument changes written into kernel nodes in place (no capture), per launch
    updates: int = 0  # re-captures applied in place to the existing executable graph
    instantiations: int = 0  # executable graphs put into service (the first, then refused updates)


def exec_update(executable, template) -> bool:
    """Apply ``template``'s kernel parameters to ``executable`` in place; False when refused or impossible.

    Both are CuPy ``Graph`` objects; CuPy has no update API, so this goes through cuda-bindings
    with their raw handles.
    """
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return False
    err, _info = cudart.cudaGraphExecUpdate(executable.graphExec, template.graph)
    if err != cudart.cudaError_t.cudaSuccess:
        cudart.cudaGetLastError()  # a refused update leaves its error as the thread's last error
        return False
    return True


class GraphRunner:
    """One declared graph: captured once, replayed, updated in place when its arguments change."""

    def __init__(self, name: str, span: Span, kernels: Sequence[LoadedKernel], cells: ArgumentCells,
                 capture_stream, stats: GraphStats):
        self.name = name
        self.span = span
        self.kernels = tuple(kernels)
        self._cells = cells
        self._capture_stream = capture_stream  # non-blocking: the legacy default stream cannot capture
        self.stats = stats
        self.executable = None  # the cupy.cuda.Graph launched
        self._template = None  # the last capture applied by update; kept alive with the executable
        self._nodes: KernelNodes | None = None  # the executable's kernel nodes, when they can be rewritten
        self._version = -1  # cells.version when the executable's arguments were last checked
        self._values: tuple = ()

    @property
    def captured(self) -> bool:
        return self.executable is not None

    def capture(self, stream) -> None:
        """Capture, instantiate, and upload on ``stream`` (after the executor's eager run of the kernels)."""
        graph = self._capture()
        graph.upload(stream)
        self._install(graph)

    def _install(self, graph) -> None:
        """Put a freshly captured graph into service, with its kernel nodes for in-place updates."""
        self.executable, self._template = graph, None
        self._nodes = kernel_nodes(graph.graph, self.kernels)
        self.stats.instantiations += 1

    def launch(self, stream) -> None:
        """One replay; brings the executable graph's arguments up to date first when a cell changed."""
        if self._version != self._cells.version:
            self._refresh(stream)
        self.executable.launch(stream)

    def _signature(self) -> tuple:
        return tuple(k.argument_values() for k in self.kernels)

    def _refresh(self, stream) -> None:
        if self._nodes is not None:
            changed = self._cells.changed_since(self._version)
            rewritten = self._nodes.update(self.executable.graphExec, changed)
            if rewritten is not None:
                self.stats.node_updates += 1 if rewritten else 0  # a change elsewhere rewrites nothing here
                self._version = self._cells.version
                return
            self._nodes = None  # refused once: from now on re-capture (nodes may be half updated)
            self._values = ()  # and compare nothing with the values of the last capture
        if self._signature() != self._values:
            fresh = self._capture()
            if exec_update(self.executable, fresh):
                self._template = fresh
                self.stats.updates += 1
            else:
                fresh.upload(stream)
                self._install(fresh)
        self._version = self._cells.version

    def _capture(self):
        from cupy.cuda import runtime

        stream = self._capture_stream
        errors = cuda_error_types()
        last = self.kernels[0]
        values, version = self._signature(), self._cells.version
        stream.begin_capture(mode=runtime.streamCaptureModeThreadLocal)
        try:
            for kernel in self.kernels:
                last = kernel
                kernel.launch(stream.ptr)
        except BaseException as exc:
            _end_quietly(stream, errors)
            if isinstance(exc, errors):
                raise kernel_failure(exc, last.kernel, self.name, "while its graph was captured") from None
            raise
        try:
            graph = stream.end_capture()
        except errors as exc:
            raise kernel_failure(exc, last.kernel, self.name, "when its graph's capture ended") from None
        self.stats.captures += 1
        self._values, self._version = values, version
        return graph

    def release(self) -> None:
        self.executable = self._template = self._nodes = None


def _end_quietly(stream, errors: tuple) -> None:
    """End a capture that already failed, so the stream can be used again; its graph is dropped."""
    try:
        stream.end_capture()
    except errors:
        pass


@dataclass
class GraphCache:
    """The executable graphs of one compiled program, by (pipeline, shape signature, graph name).

    Each shape signature has its own executor and so its own graphs; the cache is where a program
    finds them all (to count captures, or to release one signature's graphs with its executor).
    """

    stats: GraphStats = field(default_factory=GraphStats)
    _runners: dict[GraphKey, GraphRunner] = field(default_factory=dict)

    @staticmethod
    def key(pipeline: str, sizes: dict[str, int], graph: str) -> GraphKey:
        return (pipeline, tuple(sorted(sizes.items())), graph)

    def add(self, key: GraphKey, runner: GraphRunner) -> None:
        self._runners[key] = runner

    def get(self, key: GraphKey) -> GraphRunner | None:
        return self._runners.get(key)

    def keys(self) -> list[GraphKey]:
        return list(self._runners)

    def evict(self, pipeline: str, sizes: dict[str, int]) -> None:
        """Release the graphs of one shape signature (its executor is closing)."""
        signature = tuple(sorted(sizes.items()))
        for key in [k for k in self._runners if k[0] == pipeline and k[1] == signature]:
            self._runners.pop(key).release()
