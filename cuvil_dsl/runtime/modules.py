"""CUBINs loaded as modules, and kernels launched from prebuilt argument arrays.

A launch costs one ``cuLaunchKernel`` and nothing else in Python: every kernel's parameter array
(``void*[]``) is built once, pointing at argument *cells* (ctypes values). Cells are shared: one
per buffer pointer and one per uniform value, whichever kernels take them, so rebinding an input
to another device array or changing a scalar parameter is one store into one cell, and the cells'
:attr:`ArgumentCells.version` tells captured graphs that their baked-in arguments went stale.

Modules stay referenced by the kernels loaded from them (and those by the executor and its
graphs): a module unloaded while a graph that launches its functions is alive, or during a
capture, would leave the graph pointing at freed code.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

from cuvil_dsl.diagnostics import InternalError, UserError, error

if TYPE_CHECKING:  # types only: importing the API must not pull in the renderer and the compiler
    from cuvil_dsl.codegen.artifact import KernelArg, RenderedKernel, TensorMap
    from cuvil_dsl.compile.units import CompiledUnit
    from cuvil_dsl.types import DType

PORTABLE_CLUSTER = 8  # CTAs a cluster may have without the kernel's opt-in (cuda.h)
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute (cuda.h), not in CuPy's driver module

_SCALAR_CTYPES: dict[str, type] = {
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "int": ctypes.c_int32,
    "int32_t": ctypes.c_int32,
    "unsigned int": ctypes.c_uint32,
    "uint32_t": ctypes.c_uint32,
    "long long": ctypes.c_int64,
    "int64_t": ctypes.c_int64,
    "bool": ctypes.c_bool,
    "char": ctypes.c_int8,
    "signed char": ctypes.c_int8,
    "int8_t": ctypes.c_int8,
    "unsigned char": ctypes.c_uint8,
    "uint8_t": ctypes.c_uint8,
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__)\b")


def scalar_ctype(arg: KernelArg) -> type:
    """The ctypes type of a scalar kernel parameter, from its C type as the renderer wrote it."""
    base = " ".join(_QUALIFIERS.sub(" ", arg.ctype).split())
    try:
        return _SCALAR_CTYPES[base]
    except KeyError:
        raise InternalError(f"kernel argument `{arg.name}` has C type {arg.ctype!r}, which the runtime cannot pass") from None


class NoRoomForWorkspace(Exception):
    """A kernel's workspace could not be allocated (load_kernels turns it into E509)."""


class _WorkspaceCell(ctypes.c_void_p):
    """A workspace's pointer cell; it owns the memory, so a parameter array pointing at it (a loaded
    kernel, a captured graph's kernel) keeps the memory alive."""

    def __init__(self, memory) -> None:
        super().__init__(memory.ptr)
        self.memory = memory


class ArgumentCells:
    """The current value of every kernel argument, one ctypes cell per buffer and per uniform."""

    def __init__(self) -> None:
        self._pointers: dict[str, ctypes.c_void_p] = {}
        self._scalars: dict[tuple[str, type], ctypes._SimpleCData] = {}
        self._maps: dict[tuple[str, TensorMap], tuple[DType, object]] = {}  # (argument, geometry) -> (dtype, cell)
        self.version = 0  # bumped whenever any cell's value changes
        self._changed: dict[str, int] = {}  # argument name -> the version of its last change
        self._workspaces: dict[str, tuple[object, ctypes.c_void_p]] = {}  # kernel name -> (memory, pointer cell)

    def pointer(self, name: str) -> ctypes.c_void_p:
        return self._pointers.setdefault(name, ctypes.c_void_p(0))

    def scalar(self, name: str, ctype: type) -> ctypes._SimpleCData:
        return self._scalars.setdefault((name, ctype), ctype())

    def tensor_map(self, arg: KernelArg):
        """The TMA descriptor cell of a ``tensormap`` argument, encoded from its buffer's pointer now
        and again whenever that pointer changes. Kernels sharing a name and geometry share a cell."""
        from cuvil_dsl.runtime.tensor_maps import TensorMapCell, encode

        key = (arg.name, arg.tensor_map)
        found = self._maps.get(key)
        if found is None:
            cell = TensorMapCell()
            encode(cell, arg.tensor_map, arg.dtype, self.pointer(arg.tensor_map.buffer).value or 0)
            found = self._maps[key] = (arg.dtype, cell)
        return found[1]

    def workspace(self, kernel: str, nbytes: int) -> ctypes.c_void_p:
        """The pointer cell of kernel ``kernel``'s workspace: ``nbytes`` of device memory of its own,
        allocated (its own ``cudaMalloc``, like the arena, so captured graphs keep a valid pointer)
        and zeroed now, once; it lives as long as these cells (:meth:`release`). Never shared: two
        kernels of one graph may both be split-K GEMMs, and their counters must not meet."""
        found = self._workspaces.get(kernel)
        if found is None:
            import cupy

            try:
                memory = cupy.cuda.Memory(nbytes)
            except cupy.cuda.runtime.CUDARuntimeError as exc:  # cudaErrorMemoryAllocation: not sticky
                raise NoRoomForWorkspace(str(exc)) from None
            cupy.cuda.runtime.memset(memory.ptr, 0, nbytes)  # synchronous: before any launch or capture
            found = self._workspaces[kernel] = (memory, _WorkspaceCell(memory))
        return found[1]

    def workspaces(self) -> dict[str, tuple[int, int]]:
        """Kernel name -> (device pointer, bytes) of every workspace allocated."""
        return {name: (memory.ptr, memory.size) for name, (memory, _cell) in self._workspaces.items()}

    def release(self) -> None:
        """Drop the workspaces (the executor's close). Each is freed once no loaded kernel holds its cell."""
        self._workspaces.clear()

    def set_pointer(self, name: str, ptr: int) -> None:
        cell = self.pointer(name)
        if (cell.value or 0) != ptr:
            cell.value = ptr
            self.version += 1
            self._changed[name] = self.version
            if self._maps:
                self._encode_maps_of(name, ptr)

    def _encode_maps_of(self, buffer: str, ptr: int) -> None:
        from cuvil_dsl.runtime.tensor_maps import encode

        for (arg_name, spec), (dtype, cell) in self._maps.items():
            if spec.buffer == buffer:
                encode(cell, spec, dtype, ptr)
                self._changed[arg_name] = self.version

    def changed_since(self, version: int) -> set[str]:
        """Names of the arguments whose value changed after ``version``."""
        return {name for name, v in self._changed.items() if v > version}

    def set_uniforms(self, values: Mapping[str, object]) -> None:
        """Store every uniform a kernel takes from ``values`` (host-evaluated scalars)."""
        for (name, ctype), cell in self._scalars.items():
            if name not in values:
                raise InternalError(f"kernel argument `{name}` is not among the plan's host-evaluated values")
            fresh = ctype(_python_value(values[name], ctype))
            if bytes(fresh) != bytes(cell):  # bytes, so a NaN uniform does not count as changed every run
                cell.value = fresh.value
                self.version += 1
                self._changed[name] = self.version


def _python_value(value: object, ctype: type) -> float | int | bool:
    item = value.item() if hasattr(value, "item") else value  # rank-0 arrays from to_tensor
    if ctype in (ctypes.c_float, ctypes.c_double):
        return float(item)
    if ctype is ctypes.c_bool:
        return bool(item)
    return int(item)


@dataclass
class LoadedKernel:
    """One kernel ready to launch: its function, launch shape and prebuilt parameter array."""

    kernel: RenderedKernel
    function: object  # cupy.cuda.function.Function; holds its Module
    _params: ctypes.Array = field(repr=False)
    _cells: tuple = field(repr=False)  # keeps the cells the parameter array points at alive
    grid: tuple[int, int, int] | None = None  # launched instead of kernel.grid (clusters.fitted_grid)

    def __post_init__(self) -> None:
        from cupy_backends.cuda.api import driver

        self._launch_kernel = driver.launchKernel
        self._fn = self.function.ptr
        self.grid = self.grid or self.kernel.grid
        self._dims = (*self.grid, *self.kernel.block)
        self._shared = self.kernel.shared_bytes
        self._params_ptr = ctypes.addressof(self._params)

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def function_handle(self) -> int:
        """The ``CUfunction`` launched (what a captured graph's kernel node records)."""
        return self._fn

    @property
    def argument_names(self) -> tuple[str, ...]:
        return tuple(arg.name for arg in self.kernel.args)

    @property
    def parameter_array(self) -> ctypes.Array:
        """The ``void*[]`` of argument addresses, pointing at the current cells."""
        return self._params

    def launch(self, stream_ptr: int) -> None:
        """Enqueue one launch on the stream (captured when the stream is capturing)."""
        gx, gy, gz, bx, by, bz = self._dims
        self._launch_kernel(self._fn, gx, gy, gz, bx, by, bz, self._shared, stream_ptr, self._params_ptr, 0)

    def argument_values(self) -> tuple:
        """The current argument values, to tell whether a captured launch is still current."""
        return tuple(cell.value for cell in self._cells)


def _cell(kernel: RenderedKernel, arg: KernelArg, cells: ArgumentCells):
    if arg.kind == "buffer":
        return cells.pointer(arg.name)
    if arg.kind == "tensormap":
        return cells.tensor_map(arg)
    if arg.kind == "workspace":
        return cells.workspace(kernel.name, arg.workspace)
    return cells.scalar(arg.name, scalar_ctype(arg))


def _parameter_array(kernel: RenderedKernel, cells: ArgumentCells) -> tuple[ctypes.Array, tuple]:
    chosen = tuple(_cell(kernel, arg, cells) for arg in kernel.args)
    addresses = (getattr(c, "address", None) or ctypes.addressof(c) for c in chosen)
    params = (ctypes.c_void_p * max(len(chosen), 1))(*addresses)
    return params, chosen


def load_kernels(kernels: Iterable[RenderedKernel], units: Iterable[CompiledUnit], cells: ArgumentCells,
                 max_shared: int) -> dict[str, LoadedKernel]:
    """Load each unit's CUBIN once and resolve every kernel's entry in it, by kernel name.

    ``max_shared`` is the device's opt-in limit for shared memory per block, dynamic and static (E503 beyond).
    """
    from cupy.cuda.function import Module
    from cupy_backends.cuda.api import driver

    from cuvil_dsl.runtime.clusters import fitted_grid

    by_entry: dict[str, CompiledUnit] = {entry: unit for unit in units for entry in unit.unit.kernels}
    modules: dict[str, Module] = {}
    loaded: dict[str, LoadedKernel] = {}
    for kernel in kernels:
        unit = by_entry.get(kernel.entry)
        if unit is None:
            raise InternalError(f"no compiled unit holds entry `{kernel.entry}` of kernel `{kernel.name}`")
        module = modules.get(unit.key)
        if module is None:
            module = modules[unit.key] = Module()
            module.load(unit.cubin)
        function = module.get_function(kernel.entry)
        static = driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function.ptr)
        if kernel.shared_bytes + static > max_shared:
            message = (f"kernel `{kernel.name}` needs {kernel.shared_bytes + static} bytes of shared memory per block"
                       f" ({kernel.shared_bytes} dynamic, {static} static); this GPU allows {max_shared}")
            raise UserError([error("E503", message, kernel.span, hint="use smaller tiles for this kernel")])
        # without the opt-in a function may take 48 KB of shared memory in all, dynamic and static: ask for the
        # dynamic bytes beyond what the driver says it allows now
        if kernel.shared_bytes > driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                         function.ptr):
            driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    kernel.shared_bytes)
        if kernel.persistent_cluster > PORTABLE_CLUSTER:  # before the driver is asked how many clusters fit
            driver.funcSetAttribute(function.ptr, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        try:
            params, chosen = _parameter_array(kernel, cells)
        except NoRoomForWorkspace:
            need = next(arg.workspace for arg in kernel.args if arg.kind == "workspace")
            message = f"kernel `{kernel.name}` needs a workspace of {need / 2**20:.1f} MiB, and the GPU has no room for it"
            raise UserError([error("E509", message, kernel.span, hint="use smaller shapes")]) from None
        loaded[kernel.name] = LoadedKernel(kernel, function, params, chosen, fitted_grid(kernel, function.ptr))
    return loaded
