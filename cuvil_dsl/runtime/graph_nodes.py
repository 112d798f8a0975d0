"""Kernel nodes of an executable graph, rewritten in place when their arguments change.

A captured graph bakes every kernel's argument values into its nodes. When one changes (an
input rebound to a caller's device array, a scalar parameter with a new value) the node's
parameters are replaced with ``cuGraphExecKernelNodeSetParams``: no new capture, no new
graph, no instantiation, no upload; the driver copies the new values and the next launch
uses them (launches already queued keep the old ones).

The driver API is bound with ctypes from ``libcuda.so.1`` (the library CuPy already loaded):
its ABI is stable across CUDA 12 and 13, whereas CuPy exposes none of these calls and the
cuda-bindings Python API has changed between releases. Only the ``_v2`` entry points are used
(CUDA 12.0 and later), with their struct ``CUDA_KERNEL_NODE_PARAMS_v2`` from ``cuda.h``.
When anything here is unavailable, :func:`kernel_nodes` returns ``None`` and the runner falls
back to re-capturing and ``cudaGraphExecUpdate`` (see :mod:`~cuvil_dsl.runtime.graphs`).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Sequence

from cuvil_dsl.runtime.modules import LoadedKernel

CU_GRAPH_NODE_TYPE_KERNEL = 0
CUDA_SUCCESS = 0


class KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2`` (cuda.h, CUDA 12.0+)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
        ("extra", ctypes.POINTER(ctypes.c_void_p)),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


class _Driver:
    """The four driver entry points this module needs, bound once per process."""

    def __init__(self, lib: ctypes.CDLL):
        handle, node = ctypes.c_void_p, ctypes.c_void_p
        self.get_nodes = lib.cuGraphGetNodes
        self.get_nodes.argtypes = [handle, ctypes.POINTER(node), ctypes.POINTER(ctypes.c_size_t)]
        self.node_type = lib.cuGraphNodeGetType
        self.node_type.argtypes = [node, ctypes.POINTER(ctypes.c_int)]
        self.get_params = lib.cuGraphKernelNodeGetParams_v2
        self.get_params.argtypes = [node, ctypes.POINTER(KernelNodeParams)]
        self.exec_set_params = lib.cuGraphExecKernelNodeSetParams_v2
        self.exec_set_params.argtypes = [handle, node, ctypes.POINTER(KernelNodeParams)]
        for fn in (self.get_nodes, self.node_type, self.get_params, self.exec_set_params):
            fn.restype = ctypes.c_int


@functools.cache
def driver() -> _Driver | None:
    """The bound driver API, or None where libcuda (or one of its entry points) is missing."""
    try:
        return _Driver(ctypes.CDLL("libcuda.so.1"))
    except (OSError, AttributeError):
        return None


class KernelNodes:
    """The kernel nodes of one captured graph, each paired with the kernel it launches."""

    def __init__(self, api: _Driver, nodes: Sequence[tuple[int, KernelNodeParams, LoadedKernel]]):
        self._api = api
        self._nodes = []
        self._by_argument: dict[str, list[int]] = {}
        for i, (node, params, kernel) in enumerate(nodes):
            # The parameter array never moves (it points at the cells), so each node's new
            # parameters are ready now: an update is one driver call per node.
            params.kernelParams = ctypes.cast(kernel.parameter_array, ctypes.POINTER(ctypes.c_void_p))
            self._nodes.append((node, params))
            for name in dict.fromkeys(kernel.argument_names):
                self._by_argument.setdefault(name, []).append(i)

    def __len__(self) -> int:
        return len(self._nodes)

    def update(self, graph_exec: int, changed: set[str]) -> int | None:
        """Give every node that takes one of the ``changed`` arguments its current values.

        Returns how many nodes were rewritten, or None when the driver refused one (the caller
        then re-captures; nodes rewritten before the refusal are harmless, since the fallback
        replaces or updates every node).
        """
        touched = sorted({i for name in changed for i in self._by_argument.get(name, ())})
        for i in touched:
            node, params = self._nodes[i]
            if self._api.exec_set_params(graph_exec, node, ctypes.byref(params)) != CUDA_SUCCESS:
                return None
        return len(touched)


def kernel_nodes(graph: int, kernels: Sequence[LoadedKernel]) -> KernelNodes | None:
    """Pair the kernel nodes of ``graph`` (a ``CUgraph``) with ``kernels``, by function.

    None unless every node is a kernel node launching a distinct one of ``kernels`` and every
    kernel has exactly one node; then the in-place path is safe, and otherwise re-capture is.
    """
    api = driver()
    if api is None or not kernels:
        return None
    count = ctypes.c_size_t(0)
    if api.get_nodes(graph, None, ctypes.byref(count)) != CUDA_SUCCESS or count.value != len(kernels):
        return None
    handles = (ctypes.c_void_p * count.value)()
    if api.get_nodes(graph, handles, ctypes.byref(count)) != CUDA_SUCCESS:
        return None
    by_function = {kernel.function_handle: kernel for kernel in kernels}
    if len(by_function) != len(kernels):
        return None  # one function launched twice: nodes cannot be told apart by function
    paired: list[tuple[int, KernelNodeParams, LoadedKernel]] = []
    for node in handles[: count.value]:
        kind = ctypes.c_int(-1)
        if api.node_type(node, ctypes.byref(kind)) != CUDA_SUCCESS or kind.value != CU_GRAPH_NODE_TYPE_KERNEL:
            return None
        params = KernelNodeParams()
        if api.get_params(node, ctypes.byref(params)) != CUDA_SUCCESS:
            return None
        kernel = by_function.pop(params.func or 0, None)
        if kernel is None:
            return None
        params.extra = None
        paired.append((node, params, kernel))
    return KernelNodes(api, paired)
