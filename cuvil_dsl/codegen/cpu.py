"""numba rendering: one Python module per fused kernel, specialised on the bound sizes.

:func:`render_cpu` builds a :class:`~cuvil_dsl.codegen.program.KernelProgram` per kernel (the
same one the CUDA renderer reads) and hands it, wrapped in a :class:`CpuKernel` (parameters,
addressing, stores, the point walk), to the template of its kind: ``cpu_elementwise`` (one
fused ``prange`` loop), ``cpu_rows`` (a ``prange`` over rows, each row's phases in order) or
``cpu_matmul`` (NumPy's BLAS, then an elementwise or row epilogue). Sizes are literals in the
source; scalar parameters stay run-time arguments.

Every buffer is passed as a flat C-contiguous array of its storage type (f16 and bf16 as
uint16 bit patterns), so addressing is the same offset arithmetic as on the GPU. Functions
carry an explicit signature, so numba compiles (or loads its cache) when the module is
imported, never on a first call.

User names appear only in comments (``b0,  # x: f32[N] input``), through
:func:`~cuvil_dsl.codegen.names.comment_text`; identifiers are generated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuvil_dsl.codegen.addressing import Addressing, Coord
from cuvil_dsl.codegen.base import rounded_argument, rounds
from cuvil_dsl.codegen.cpu_lang import NumbaLanguage, PythonWalk
from cuvil_dsl.codegen.names import comment_text, entry_name
from cuvil_dsl.codegen.program import KernelProgram, Store, build_program
from cuvil_dsl.passes.indexing import Map
from cuvil_dsl.passes.plan import FusedKernel, FusionPlan
from cuvil_dsl.types import DType, TensorType, shape_str

PRELUDE_PATH = Path(__file__).with_name("cpu_prelude.py")


@dataclass(frozen=True)
class Param:
    """One parameter of a generated kernel, in order: buffers, workspaces, then uniforms."""

    kind: str  # "buffer" | "workspace" | "scalar"
    name: str  # the plan's buffer or uniform value; for a workspace, its generated name
    dtype: DType
    numba_type: str  # e.g. "uint16[::1]" or "float32"
    size: int = 0  # elements of a workspace (the runtime allocates it once)


@dataclass(frozen=True)
class CpuModule:
    """One generated module: the runtime writes ``source`` to a file named by its hash and calls ``entry``."""

    name: str  # the fused kernel's name, e.g. "forward_k1"
    entry: str  # the function the runtime calls, with ``params`` in order
    file_name: str  # a readable name for records: ``<entry>.py``
    source: str
    params: tuple[Param, ...]


@dataclass(frozen=True)
class Gemm:
    """A GEMM result the kernel reads from a workspace instead of computing it."""

    value: str  # the matmul op's id
    workspace: str  # the workspace's generated name


class CpuKernel:
    """One kernel being rendered: its parameters, addressing, stores and walks."""

    def __init__(self, program: KernelProgram, lang: NumbaLanguage, fast_math: bool):
        self.p = program
        self.lang = lang
        self.fast_math = fast_math
        self.kernel: FusedKernel = program.kernel
        self.at = Addressing(program)
        self.names = {b: f"b{i}" for i, b in enumerate(program.buffers)}
        self.uniform_names = {u: f"u{i}" for i, u in enumerate(program.uniforms)}
        self.workspaces: list[Param] = []
        self.gemm: Gemm | None = None
        self._counter = 0

    # ------------------------------------------------------------------ names and types
    def fresh(self, prefix: str = "t") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def dtype(self, value: str) -> DType:
        t = self.p.types[value]
        assert isinstance(t, TensorType), value
        return t.dtype

    def add_workspace(self, dtype: DType, size: int) -> str:
        name = f"w{len(self.workspaces)}"
        self.workspaces.append(Param("workspace", name, dtype, self.lang.array_type(dtype), size))
        return name

    # ------------------------------------------------------------------ parameters
    def params(self) -> tuple[Param, ...]:
        out = [Param("buffer", b, self.dtype(b), self.lang.array_type(self.dtype(b))) for b in self.p.buffers]
        out += self.workspaces
        out += [Param("scalar", u, self.dtype(u), self.lang.scalar_type(self.dtype(u))) for u in self.p.uniforms]
        return tuple(out)

    def local(self, prm: Param) -> str:
        """The generated name a parameter has inside the kernel."""
        if prm.kind == "workspace":
            return prm.name
        return self.names[prm.name] if prm.kind == "buffer" else self.uniform_names[prm.name]

    def param_lines(self) -> list[str]:
        """``b0,  # x: f16[T, H] input`` per parameter, for a ``def``."""
        lines = []
        for prm in self.params():
            if prm.kind == "workspace":
                lines.append(f"    {prm.name},  # workspace: {prm.dtype.value}[{prm.size}]")
                continue
            role = "input" if prm.name in self.kernel.inputs else "output" if prm.kind == "buffer" else "scalar"
            t = self.p.types[prm.name]
            lines.append(f"    {self.local(prm)},  # {comment_text(prm.name)}: {prm.dtype.value}{shape_str(t.shape)} {role}")
        return lines

    def jit_function(self, name: str, body: list[str]) -> list[str]:
        """A parallel njit function over the kernel's parameters, compiled when the module loads."""
        sig = f"void({', '.join(p.numba_type for p in self.params())})"
        return [f'@numba.njit("{sig}", parallel=True, fastmath={self.fast_math}, error_model="numpy", cache=True)',
                f"def {name}(", *self.param_lines(), "):", *indent(body)]

    def arguments(self) -> str:
        """The parameters as a call's argument list."""
        return ", ".join(self.local(p) for p in self.params())

    # ------------------------------------------------------------------ addressing and stores
    def load(self, value: str, m: Map, coord: Coord, flat: str | None = None) -> str:
        ref = f"{self.names[value]}[{self.at.offset(value, m, coord, flat)}]"
        return self.lang.load(ref, self.dtype(value))

    def unrounded(self, lines: list[str], expr: str, value: str) -> str:
        """``expr`` to store as ``value``: a name that ``lines`` bind to a value rounded to ``value``'s 16-bit dtype
        (``t = cvl.round_f16(...)``) is stored from the unrounded form, since the store rounds it the same way
        (rounding to the nearest half is idempotent: the same bits, one conversion instead of three), as
        ``CudaKernel.unrounded`` does for the GPU."""
        dtype = self.dtype(value)
        if dtype not in (DType.F16, DType.BF16):
            return expr
        found = rounded_argument(lines, f"{expr} = cvl.round_{dtype.value}(", ")")
        return expr if found is None else found

    def store_lines(self, store: Store, expr: str, coord: Coord, flat: str | None = None,
                    skip: tuple[int, ...] = ()) -> list[str]:
        """The store of ``expr``, guarded so axes the value lacks are written at coordinate 0 only
        (``skip``: axes the caller already runs once)."""
        target = f"{self.names[store.value]}[{self.at.offset(store.value, store.map, coord, flat)}]"
        line = f"{target} = {self.lang.store(expr, self.dtype(store.value))}"
        missing = self.at.missing_axes(store.map, skip)
        if missing:
            return [f"if {' and '.join(f'{coord(d)} == 0' for d in missing)}:", f"    {line}"]
        return [line]

    def coords(self, index: str, axes: list[int]) -> list[str]:
        """Assignments of the coordinates of flat ``index`` over the domain ``axes`` (row-major)."""
        sizes = [self.p.domain[d] for d in axes]
        lines, inner = [], 1
        for j in reversed(range(len(axes))):
            div = f"({index} // {inner})" if inner > 1 else index
            lines.insert(0, f"c{axes[j]} = {div} % {sizes[j]}" if j else f"c{axes[j]} = {div}")
            inner *= sizes[j]
        return lines

    # ------------------------------------------------------------------ walks
    def walk(self, emit: Callable[[str], None], coord: Coord, flat: str | None = None,
             anchor: Callable[[str, Map], str | None] = lambda v, m: None) -> PythonWalk:
        """A point walk reading buffers at ``coord`` (or the flat index), the GEMM result from its
        workspace, and what ``anchor`` computes itself."""
        def special(value: str, m: Map) -> str | None:
            if self.gemm is not None and value == self.gemm.value:
                return self._gemm_read(emit, m, coord, flat)
            return anchor(value, m)

        return PythonWalk(self.lang, self.p.ops, self.p.types, self.p.row_axis, emit, self.fresh,
                          lambda v, m: self.load(v, m, coord, flat), self.uniform_names, special)

    def _gemm_read(self, emit: Callable[[str], None], m: Map, coord: Coord, flat: str | None) -> str:
        op = self.p.ops[self.gemm.value]
        value = f"{self.gemm.workspace}[{self.at.offset(op.out, m, coord, flat)}]"
        name = self.fresh()
        emit(f"{name} = {self.lang.round(value, self.dtype(op.out)) if rounds(op) else value}")
        return name

    def leaves(self, roots: list[tuple[str, Map]],
               anchor: Callable[[str, Map], str | None] = lambda v, m: None) -> list[tuple[str, Map]]:
        """The (buffer, map) reads that rendering ``roots`` needs, the GEMM result included."""
        def walk(record) -> PythonWalk:
            def special(value: str, m: Map) -> str | None:
                if self.gemm is not None and value == self.gemm.value:
                    record(value, m)
                    return "g"
                return anchor(value, m)

            return PythonWalk(self.lang, self.p.ops, self.p.types, self.p.row_axis, lambda s: None, self.fresh,
                              record, self.uniform_names, special)

        return self.at.leaves(walk, roots)


def indent(lines: list[str], n: int = 1) -> list[str]:
    return ["    " * n + x for x in lines]


def prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


TEMPLATES = {"elementwise": "cpu_elementwise", "reduce": "cpu_rows", "row": "cpu_rows",
             "matmul": "cpu_matmul", "matmul_softmax": "cpu_matmul", "attention": "cpu_attention"}


def _template(kind: str):
    """The kernel template module of ``kind`` (imported late: templates import this module)."""
    return importlib.import_module(f"cuvil_dsl.codegen.{TEMPLATES[kind]}").render


def prelude_hash() -> str:
    """A hash of the helpers' source, written into every module: numba's cache watches only the
    kernel's own file, so a helper change must change the kernel's file (and name) too."""
    return hashlib.sha256(PRELUDE_PATH.read_bytes()).hexdigest()[:16]


def render_kernel(plan: FusionPlan, kernel: FusedKernel, sizes: dict[str, int], *,
                  fast_math: bool = False) -> CpuModule:
    """The module of one kernel of ``plan`` at ``sizes``."""
    # A GEMM's row softmax runs as a row kernel over the GEMM's output here (there is no
    # online-softmax template on the CPU), so its softmax is expanded like any row op's.
    as_rows = dataclasses.replace(kernel, kind="row") if kernel.kind == "matmul_softmax" else kernel
    if kernel.kind == "attention":
        program = _attention_program(plan, kernel, sizes)
    else:
        program = dataclasses.replace(build_program(plan, as_rows, sizes), kernel=kernel)
    k = CpuKernel(program, NumbaLanguage(), fast_math)
    entry = entry_name(kernel.name)
    body = _template(kernel.kind)(k, entry)
    header = [f"# cuvil-dsl kernel {comment_text(kernel.name)} ({kernel.kind}) of pipeline "
              f"{comment_text(plan.pipeline.name)}, domain {list(program.domain)}",
              f"# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 {prelude_hash()}",
              "import math", "", "import numba", "import numpy as np", "",
              "from cuvil_dsl.codegen import cpu_prelude as cvl", "", ""]
    source = "\n".join(header + body) + "\n"
    return CpuModule(kernel.name, entry, f"{entry}.py", source, k.params())


def _attention_program(plan: FusionPlan, kernel: FusedKernel, sizes: dict[str, int]) -> KernelProgram:
    """An attention kernel's program for ``cpu_attention``: its ops but the second `@` as a row kernel
    that stores the (unnamed) softmax, in f32, to a workspace the template names; the buffers are the
    kernel's own."""
    softmax = kernel.ops[-1].args[0]
    rows = dataclasses.replace(kernel, kind="row", ops=kernel.ops[:-1], outputs=(softmax,))
    program = build_program(plan, rows, sizes)
    t = program.types[softmax]
    return dataclasses.replace(program, kernel=kernel, buffers=kernel.inputs + kernel.outputs,
                               types={**program.types, softmax: TensorType(DType.F32, t.shape)})


def render_cpu(plan: FusionPlan, sizes: dict[str, int], *, fast_math: bool = False) -> list[CpuModule]:
    """One numba module per kernel of ``plan``, in launch order.

    ``sizes`` binds every symbol; ``fast_math`` is numba's ``fastmath=True`` (LLVM may
    reassociate, contract and assume no NaN or infinity). Without it the arithmetic is strict
    IEEE, so results never depend on how LLVM vectorized a loop: a parallel function is
    optimized twice (its loop body alone, then inside the function numba caches), and a fresh
    compile runs the first copy while a process loading the cache runs the second.
    """
    modules = [render_kernel(plan, k, sizes, fast_math=fast_math) for k in plan.kernels]
    taken: set[str] = set()
    for i, m in enumerate(modules):  # `a__b` and `a_b` sanitise to one entry name: keep records apart
        name, n = m.file_name, 1
        while name in taken:
            n += 1
            name = f"{m.entry}_{n}.py"
        taken.add(name)
        modules[i] = dataclasses.replace(m, file_name=name)
    return modules
