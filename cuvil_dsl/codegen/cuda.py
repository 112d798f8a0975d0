"""CUDA C rendering: one translation unit per fused kernel, specialised on the bound sizes.

:func:`render_cuda` builds a :class:`~cuvil_dsl.codegen.program.KernelProgram` per kernel
and hands it, wrapped in a :class:`CudaKernel` (parameters, addressing, stores, the point
walk), to the template of its kind: ``cuda_elementwise``, ``cuda_rows`` (reductions, softmax,
norms) or ``cuda_matmul`` (GEMM with epilogue, GEMM + row softmax). Sizes are compile-time
constants; scalar parameters stay run-time arguments.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from cuvil_dsl.codegen.artifact import KernelArg, RenderedKernel, TensorMap
from cuvil_dsl.codegen.base import PointWalk, rounded_argument
from cuvil_dsl.codegen.cuda_lang import PRELUDE, STORAGE, CudaLanguage
from cuvil_dsl.codegen.names import comment_text, entry_name
from cuvil_dsl.codegen.program import KernelProgram, Store, build_program
from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.passes import configs
from cuvil_dsl.passes.indexing import Map
from cuvil_dsl.passes.plan import FusedKernel, FusionPlan, KernelConfig
from cuvil_dsl.types import DType, TensorType, shape_str

Coord = Callable[[int], str]
INT_LIMIT = 2**31 - 1
SM_COUNT = {90: 132, 80: 108, 86: 84, 89: 128}


@dataclass
class Emitted:
    """What a kernel template produced: the kernel's text and its launch shape."""

    lines: list[str]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    helpers: str = ""  # extra device code the kernel needs (PTX wrappers)
    options: tuple[str, ...] = field(default=())
    persistent_cluster: int = 0  # see RenderedKernel.persistent_cluster


class CudaKernel:
    """One kernel being rendered: its parameters, buffer addressing, stores and walks."""

    def __init__(self, program: KernelProgram, lang: CudaLanguage, arch: str, config: KernelConfig, tf32: bool):
        self.p = program
        self.lang = lang
        self.arch = arch
        self.config = config
        self.tf32 = tf32
        self.kernel: FusedKernel = program.kernel
        self.names = {b: f"b{i}" for i, b in enumerate(program.buffers)}
        self.uniform_names = {u: f"u{i}" for i, u in enumerate(program.uniforms)}
        largest = max([program.size(b) for b in program.buffers] + [element_count(program.domain)])
        self.index_t = "long long" if largest > INT_LIMIT // 2 else "int"
        self._counter = 0
        self.extra_args: list[KernelArg] = []  # TMA descriptors and a workspace a template asked for (after the uniforms)

    # ------------------------------------------------------------------ names and types
    def fresh(self, prefix: str = "t") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def dtype(self, value: str) -> DType:
        t = self.p.types[value]
        assert isinstance(t, TensorType)
        return t.dtype

    def storage(self, value: str) -> str:
        return STORAGE[self.dtype(value)]

    def uniforms(self) -> dict[str, str]:
        return {u: f"({n} != 0)" if self.dtype(u) is DType.BOOL else n for u, n in self.uniform_names.items()}

    @property
    def sm_count(self) -> int:
        return SM_COUNT.get(configs.arch_number(self.arch), 128)

    # ------------------------------------------------------------------ signature
    def args(self) -> tuple[KernelArg, ...]:
        out = []
        for b in self.p.buffers:
            const = "const " if b in self.kernel.inputs else ""
            out.append(KernelArg("buffer", b, self.dtype(b), f"{const}{self.storage(b)}* __restrict__"))
        for u in self.p.uniforms:
            dtype = self.dtype(u)
            ctype = "int" if dtype is DType.BOOL else self.lang.ctype(dtype)
            out.append(KernelArg("scalar", u, dtype, ctype))
        return tuple(out + self.extra_args)

    def tensor_map(self, name: str, buffer: str, dims: tuple[int, ...], stride: int, box: tuple[int, ...],
                   batch_stride: int = 0) -> str:
        """Ask for a TMA descriptor parameter ``name`` over ``buffer`` (see :class:`TensorMap`; three ``dims``
        with a ``batch_stride``); returns its C name. The runtime encodes it; the kernel passes ``&name`` to
        ``cp.async.bulk.tensor``."""
        spec = TensorMap(buffer, dims, stride, box, batch_stride)
        self.extra_args.append(KernelArg("tensormap", name, self.dtype(buffer), "const __grid_constant__ cvl_tensor_map", spec))
        return name

    def workspace(self, nbytes: int) -> str:
        """Ask for ``nbytes`` of scratch device memory of this kernel's own (see :class:`KernelArg`,
        kind ``workspace``: allocated and zeroed once by the runtime); returns its C name."""
        name = "cvl_workspace"
        if any(arg.kind == "workspace" for arg in self.extra_args):
            raise InternalError("a kernel has one workspace")
        self.extra_args.append(KernelArg("workspace", name, DType.F32, "unsigned char* __restrict__", workspace=nbytes))
        return name

    def signature(self, entry: str, threads: int) -> list[str]:
        c = self.config
        # an explicit minimum of one block: without it ptxas may cap registers low and spill
        bounds = f"{c.max_threads or threads}, {c.min_blocks or 1}"
        params = []
        for arg in self.args():
            if arg.kind == "tensormap":
                m = arg.tensor_map
                params.append(f"    {arg.ctype} {arg.name},  // TMA descriptor of {comment_text(m.buffer)}: "
                              f"{m.dims[1]} x {m.dims[0]}, box {m.box[1]} x {m.box[0]}")
                continue
            if arg.kind == "workspace":
                params.append(f"    {arg.ctype} {arg.name},  // the kernel's workspace: {arg.workspace} bytes, zeroed once")
                continue
            name = self.names.get(arg.name) or self.uniform_names[arg.name]
            role = "input" if arg.name in self.kernel.inputs else "output" if arg.kind == "buffer" else "scalar"
            t = self.p.types[arg.name]
            shown = shape_str(t.shape) if isinstance(t, TensorType) else ""
            params.append(f"    {arg.ctype} {name},  // {comment_text(arg.name)}: {arg.dtype.value}{shown} {role}")
        if params:
            params[-1] = params[-1].replace(",  //", "  //", 1)
        return [f'extern "C" __global__ void __launch_bounds__({bounds}) {entry}(', *params, ") {"]

    # ------------------------------------------------------------------ addressing
    def stride_literal(self, s: int) -> str:
        return f"{s}LL" if self.index_t == "long long" else str(s)

    def offset(self, value: str, m: Map, coord: Coord, flat: str | None = None) -> str:
        """Element offset of ``value``'s element at the current point (``m``: its map)."""
        shape, strides = self.p.shape(value), self.p.strides(value)
        if flat is not None and tuple(m) == tuple(range(len(self.p.domain))) and shape == self.p.domain:
            return flat
        terms = []
        for d, s, size in zip(m, strides, shape):
            if d is None or size == 1:
                continue
            terms.append(coord(d) if s == 1 else f"{coord(d)} * {self.stride_literal(s)}")
        return " + ".join(terms) or "0"

    def contiguous_axis(self, value: str, m: Map, axis: int) -> bool:
        """Does ``value`` run with stride 1 along domain ``axis`` (so vectors can read it)?"""
        for j, d in enumerate(m):
            if d == axis:
                return self.p.strides(value)[j] == 1 and self.p.shape(value)[j] > 1
        return False

    def load(self, value: str, m: Map, coord: Coord, flat: str | None = None) -> str:
        ref = f"{self.names[value]}[{self.offset(value, m, coord, flat)}]"
        return self.lang.load(ref, self.dtype(value))

    def guard(self, store: Store, coord: Coord) -> str | None:
        """Axes a stored value lacks are written once, at coordinate 0."""
        missing = [d for d in range(len(self.p.domain)) if d not in store.map and self.p.domain[d] > 1]
        return " && ".join(f"{coord(d)} == 0" for d in missing) or None

    def unrounded(self, lines: list[str], expr: str, value: str) -> str:
        """``expr`` to store as ``value``: a value that ``lines`` round to its 16-bit dtype (``const float t =
        cvl_f16(...)``) is stored from its unrounded form, since the store rounds it the same way (to the
        nearest 16-bit value: the same bits, one conversion instead of three)."""
        dtype = self.dtype(value)
        if dtype not in (DType.F16, DType.BF16):
            return expr
        found = rounded_argument(lines, f"const float {expr} = cvl_{dtype.value}(", ");")
        return expr if found is None else found

    def store_lines(self, store: Store, expr: str, coord: Coord, flat: str | None = None) -> list[str]:
        target = f"{self.names[store.value]}[{self.offset(store.value, store.map, coord, flat)}]"
        line = f"{target} = {self.lang.store(expr, self.dtype(store.value))};"
        cond = self.guard(store, coord)
        return [f"if ({cond}) {line}"] if cond else [line]

    def walk(self, emit: Callable[[str], None], coord: Coord, flat: str | None = None,
             leaf: Callable[[str, Map], str | None] | None = None,
             anchor: Callable[[str, Map], str | None] = lambda v, m: None) -> PointWalk:
        def read(value: str, m: Map) -> str:
            special = leaf(value, m) if leaf else None
            return special if special is not None else self.load(value, m, coord, flat)

        return PointWalk(self.lang, self.p.ops, self.p.types, self.p.row_axis, emit, self.fresh, read,
                         self.uniforms(), anchor)

    def leaves(self, roots: list[tuple[str, Map]], anchor: Callable[[str, Map], str | None] = lambda v, m: None
               ) -> list[tuple[str, Map]]:
        """The (buffer, map) reads that rendering ``roots`` needs, in first-use order."""
        seen: list[tuple[str, Map]] = []

        def record(value: str, m: Map) -> str:
            if (value, m) not in seen:
                seen.append((value, tuple(m)))
            return "x"

        w = PointWalk(self.lang, self.p.ops, self.p.types, self.p.row_axis, lambda s: None, self.fresh, record,
                      self.uniforms(), anchor)
        for value, m in roots:
            w.value(value, m)
        return seen


def element_count(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def indent(lines: list[str], levels: int = 1) -> list[str]:
    return ["    " * levels + line for line in lines]


TEMPLATES = {"elementwise": "cuda_elementwise", "reduce": "cuda_rows", "row": "cuda_rows",
             "matmul": "cuda_matmul", "matmul_softmax": "cuda_matmul", "attention": "cuda_attention"}


def _template(kind: str):
    """The kernel template module of ``kind`` (imported late: templates import this module)."""
    return importlib.import_module(f"cuvil_dsl.codegen.{TEMPLATES[kind]}").render


def render_kernel(plan: FusionPlan, kernel: FusedKernel, sizes: dict[str, int], arch: str, *,
                  fast_math: bool = False, tf32: bool = False) -> RenderedKernel:
    program = build_program(plan, kernel, sizes)
    dtype = program.types[kernel.anchor].dtype if kernel.anchor else program.types[kernel.outputs[0]].dtype
    config = configs.resolve(kernel.config, kernel.kind, dtype, arch, tf32)
    k = CudaKernel(program, CudaLanguage(fast_math), arch, config, tf32)
    entry = entry_name(kernel.name)
    out = _template(kernel.kind)(k, entry)
    header = [f"// cuvil-dsl kernel {comment_text(kernel.name)} ({kernel.kind}) of pipeline "
              f"{comment_text(plan.pipeline.name)}, domain {list(program.domain)}"]
    source = "\n".join([*header, PRELUDE, out.helpers, *out.lines]).replace("\n\n\n", "\n\n") + "\n"
    options = out.options + ((f"-maxrregcount={config.max_registers}",) if config.max_registers else ())
    return RenderedKernel(
        name=kernel.name, entry=entry, source=source, grid=out.grid, block=out.block,
        shared_bytes=out.shared_bytes, args=k.args(), options=options, graph=kernel.graph, span=kernel.span,
        persistent_cluster=out.persistent_cluster,
    )


def render_cuda(plan: FusionPlan, sizes: dict[str, int], arch: str, *, fast_math: bool = False,
                tf32: bool = False) -> list[RenderedKernel]:
    """One CUDA C translation unit per kernel of ``plan``, in launch order.

    ``sizes`` binds every symbol; ``arch`` is the target (``sm_80``, ``sm_90``, ...); ``tf32``
    lets f32 ``@`` use TF32 tensor cores; ``fast_math`` uses the approximate intrinsics.
    """
    return [render_kernel(plan, k, sizes, arch, fast_math=fast_math, tf32=tf32) for k in plan.kernels]
