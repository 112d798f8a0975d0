"""Fusion decisions as data: the :class:`FusionPlan` every backend renders and runs.

The planner (:mod:`cuvil_dsl.passes.fusion`) turns a checked pipeline into a plan; the CUDA
and numba renderers only read it, the runtimes only execute it, tests assert on it without
compiling. ``format_plan`` prints it (``cuvil-dsl compile --emit plan``).

A plan is a list of steps in program order:

* :class:`Launch` of one :class:`FusedKernel` (one GPU kernel, one numba function);
* :class:`GraphStep` holding the launches captured as one CUDA Graph;
* :class:`HostStep` (``sync``, ``print``, ``assert_finite``) where the program wrote it.

Values that live in memory are :class:`Buffer` s. Scalar-only work (literals, scalar
parameters and arithmetic on them, their rounding to a tensor dtype) is *uniform*: it is
evaluated once on the host before the launches (``host_ops``) and passed to kernels as
arguments, so changing ``params`` never recompiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.types import Shape, TensorType, shape_str


@dataclass(frozen=True)
class KernelConfig:
    """Launch and code-shape choices for one kernel; defaults per arch, overridden by the spec."""

    block: int = 256  # threads per block
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 32
    max_threads: int | None = None  # __launch_bounds__ first argument
    min_blocks: int | None = None  # __launch_bounds__ second argument
    max_registers: int | None = None  # -maxrregcount
    overridden: tuple[str, ...] = ()  # spec keys that set this config: block, tile, launch_bounds, max_registers


@dataclass(frozen=True)
class Buffer:
    """A value held in device (or host) memory for the whole run of a pipeline instance."""

    name: str
    type: TensorType
    role: str  # "input" | "result" | "intermediate"


@dataclass(frozen=True)
class FusedKernel:
    name: str  # "<graph or main>_k<N>", or the kernel block's own name
    kind: str  # "elementwise" | "reduce" | "row" | "matmul" | "matmul_softmax" | "attention"
    ops: tuple[ir.Op, ...]  # the tensor ops it computes, in program order
    inputs: tuple[str, ...]  # buffers it reads
    outputs: tuple[str, ...]  # buffers it writes
    uniforms: tuple[str, ...]  # host-evaluated scalar values it takes as arguments
    anchor: str | None  # the op (by out id) that sets the iteration space: reduction, row op or matmul
    config: KernelConfig
    graph: str | None
    block_name: str | None  # the `kernel` block it came from, if any
    span: Span
    domain: Shape = ()  # the iteration space: elementwise result, reduction input, GEMM output
    row_axis: int | None = None  # the axis reductions and row ops run along (GEMM: softmax axis)


@dataclass(frozen=True)
class Launch:
    kernel: FusedKernel


@dataclass(frozen=True)
class HostStep:
    stmt: ir.HostStmt


@dataclass(frozen=True)
class GraphStep:
    name: str
    launches: tuple[Launch, ...]
    span: Span


Step = Union[Launch, HostStep, GraphStep]


@dataclass(frozen=True)
class FusionPlan:
    pipeline: ir.Pipeline
    host_ops: tuple[ir.Op, ...]  # uniform (scalar) ops, evaluated on the host in this order
    steps: tuple[Step, ...]
    buffers: tuple[Buffer, ...]
    notes: tuple[str, ...] = field(default=())  # why groups were split, for --emit plan

    @property
    def kernels(self) -> tuple[FusedKernel, ...]:
        out: list[FusedKernel] = []
        for step in self.steps:
            if isinstance(step, Launch):
                out.append(step.kernel)
            elif isinstance(step, GraphStep):
                out.extend(launch.kernel for launch in step.launches)
        return tuple(out)

    def kernel(self, name: str) -> FusedKernel | None:
        return next((k for k in self.kernels if k.name == name), None)

    def buffer(self, name: str) -> Buffer | None:
        return next((b for b in self.buffers if b.name == name), None)


def format_plan(plan: FusionPlan) -> str:
    lines = [f"plan {plan.pipeline.name}"]
    for b in plan.buffers:
        lines.append(f"  buffer {b.name}: {b.type} ({b.role})")
    for op in plan.host_ops:
        from cuvil_dsl.ir.printer import format_op

        lines.append(f"  host {format_op(op)}")

    def kernel_lines(k: FusedKernel, pad: str):
        src = f" from kernel block {k.block_name}" if k.block_name else ""
        yield f"{pad}kernel {k.name} [{k.kind}{src}] ({', '.join(k.inputs)}) -> ({', '.join(k.outputs)})"
        rows = "" if k.row_axis is None else f" rows along axis {k.row_axis}"
        yield f"{pad}  domain {shape_str(k.domain)}{rows}" + (f" anchor {k.anchor}" if k.anchor else "")
        if k.uniforms:
            yield f"{pad}  uniforms {', '.join(k.uniforms)}"
        yield f"{pad}  ops {' '.join(op.out for op in k.ops)}"
        c = k.config
        tile = f" tile={c.tile_m}x{c.tile_n}x{c.tile_k}" if k.kind.startswith("matmul") else ""
        yield f"{pad}  config block={c.block}{tile}" + (
            f" launch_bounds=({c.max_threads}, {c.min_blocks})" if c.max_threads else ""
        ) + (f" max_registers={c.max_registers}" if c.max_registers else "")

    for step in plan.steps:
        if isinstance(step, Launch):
            lines.extend(kernel_lines(step.kernel, "  "))
        elif isinstance(step, GraphStep):
            lines.append(f"  graph {step.name} {{")
            for launch in step.launches:
                lines.extend(kernel_lines(launch.kernel, "    "))
            lines.append("  }")
        else:
            s = step.stmt
            lines.append(f"  host {s.kind}" + (f" {s.arg}" if s.arg else ""))
    for note in plan.notes:
        lines.append(f"  # {note}")
    return "\n".join(lines) + "\n"
