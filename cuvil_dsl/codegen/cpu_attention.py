"""Fused attention on the CPU: ``softmax(q @ k.T * c) @ v`` as one module, the probabilities in f32.

The kernel's entry runs the first ``@`` through NumPy's BLAS into an f32 workspace (as
``cpu_matmul`` does), the row template over its elementwise work and softmax into a second f32
workspace (:func:`cuvil_dsl.codegen.cpu.render_kernel` builds that part's program with the
softmax stored there instead of in a buffer: unnamed, it is never rounded to 16 bits), then
``P @ v`` by BLAS into an f32 workspace and one parallel loop that stores the product in its
dtype. The CPU backend defines the semantics the GPU kernel approximates (its numerators enter
the tensor cores rounded to 16 bits).
"""

from __future__ import annotations

from cuvil_dsl.codegen import cpu_rows
from cuvil_dsl.codegen.cpu import CpuKernel, Gemm, indent, prod
from cuvil_dsl.codegen.cpu_matmul import operand_lines
from cuvil_dsl.types import DType


def render(k: CpuKernel, entry: str) -> list[str]:
    first = k.p.ops[k.kernel.anchor]
    second = k.kernel.ops[-1]
    probs, v = second.args
    domain = k.p.domain
    lines = operand_lines(k, "lhs", first.args[0]) + operand_lines(k, "rhs", first.args[1])
    lines += operand_lines(k, "vv", v)
    acc = k.add_workspace(DType.F32, prod(domain))
    k.gemm = Gemm(first.out, acc)
    lines.append(f"np.matmul(lhs, rhs, out={acc}.reshape({domain}))")
    k.names[probs] = k.add_workspace(DType.F32, prod(domain))
    out, out_shape = second.out, k.p.shape(second.out)
    product = k.add_workspace(DType.F32, prod(out_shape))
    # every workspace exists now: they are parameters of the jitted functions too
    softmax = f"{entry}_softmax"
    store = f"{entry}_store"
    jitted = cpu_rows.render(k, softmax)
    jitted += ["", ""] + k.jit_function(store, [
        f"for i in numba.prange({prod(out_shape)}):",
        f"    {k.names[out]}[i] = {k.lang.store(f'{product}[i]', k.dtype(out))}"])
    lines += [f"{softmax}({k.arguments()})",
              f"np.matmul({k.names[probs]}.reshape({domain}), vv, out={product}.reshape({out_shape}))",
              f"{store}({k.arguments()})"]
    return jitted + ["", "", f"def {entry}(", *k.param_lines(), "):",
                     '    """Scores through NumPy\'s BLAS, the softmax in numba, the product through BLAS, the store."""',
                     *indent(lines)]
