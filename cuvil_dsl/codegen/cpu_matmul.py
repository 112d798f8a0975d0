"""GEMM kernels on the CPU: NumPy's BLAS for ``@``, then the fused epilogue in numba.

numba's own ``np.dot`` needs SciPy, which is no dependency of ours, so the module's entry is
a plain Python function: it widens f16/bf16 operands to f32 in preallocated workspaces, runs
``np.matmul`` (batched, batch dimensions broadcast, transposed operands passed as strided
views, which BLAS takes as they are) into an f32 workspace (f64 for f64), then calls the
numba function that reads the GEMM result from that workspace: the elementwise template for
``matmul``, the row template (softmax along the last axis) for ``matmul_softmax``.
"""

from __future__ import annotations

from cuvil_dsl.codegen import cpu_elementwise, cpu_rows
from cuvil_dsl.codegen.cpu import CpuKernel, Gemm, indent, prod
from cuvil_dsl.types import DType


def _operand(k: CpuKernel, value: str) -> tuple[str, bool]:
    """The buffer behind a GEMM operand, and whether the operand is its transpose."""
    flips = 0
    while value in k.p.ops and k.p.ops[value].op == "transpose":
        flips += 1
        value = k.p.ops[value].args[0]
    assert value in k.kernel.inputs, f"{k.kernel.name}: GEMM operand `{value}` is not read from memory"
    return value, flips % 2 == 1


def operand_lines(k: CpuKernel, local: str, value: str) -> list[str]:
    """Bind ``local`` to the operand as an f32/f64 array of its buffer's shape, transposed if needed."""
    buffer, transposed = _operand(k, value)
    shape = k.p.shape(buffer)
    src = f"{k.names[buffer]}.reshape({shape})"
    dtype = k.dtype(buffer)
    lines = []
    if dtype is DType.F16:
        ws = k.add_workspace(DType.F32, prod(shape))
        lines.append(f"np.copyto({ws}.reshape({shape}), {k.names[buffer]}.view(np.float16).reshape({shape}))")
        src = f"{ws}.reshape({shape})"
    elif dtype is DType.BF16:
        # bf16 bits are the upper half of the f32 bits: widening is a shift
        ws = k.add_workspace(DType.F32, prod(shape))
        lines.append(f"np.left_shift({src}, 16, out={ws}.view(np.uint32).reshape({shape}), dtype=np.uint32)")
        src = f"{ws}.reshape({shape})"
    lines.append(f"{local} = {src}.swapaxes(-1, -2)" if transposed else f"{local} = {src}")
    return lines


def render(k: CpuKernel, entry: str) -> list[str]:
    gemm = next(op for op in k.p.ops.values() if op.op == "matmul")
    lines = operand_lines(k, "lhs", gemm.args[0]) + operand_lines(k, "rhs", gemm.args[1])
    acc_dtype = DType.F64 if k.dtype(gemm.out) is DType.F64 else DType.F32
    acc = k.add_workspace(acc_dtype, prod(k.p.domain))
    k.gemm = Gemm(gemm.out, acc)
    lines.append(f"np.matmul(lhs, rhs, out={acc}.reshape({k.p.domain}))")
    epilogue = f"{entry}_epilogue"
    template = cpu_rows if k.kernel.kind == "matmul_softmax" else cpu_elementwise
    jitted = template.render(k, epilogue)  # after the workspaces exist: they are parameters too
    lines.append(f"{epilogue}({k.arguments()})")
    return jitted + ["", "", f"def {entry}(", *k.param_lines(), "):",
                     '    """The GEMM through NumPy\'s BLAS, then the fused epilogue."""', *indent(lines)]
