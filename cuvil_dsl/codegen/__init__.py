"""Renderers: a :class:`~cuvil_dsl.passes.plan.FusionPlan` to source, one unit per kernel.

Entry point: :func:`render_cuda` (CUDA C for NVRTC). :func:`check_barriers_uniform` checks
that every ``__syncthreads()`` of a rendered kernel stands in block-uniform control flow.
"""

from cuvil_dsl.codegen.artifact import KernelArg, RenderedKernel
from cuvil_dsl.codegen.barriers import check_barriers_uniform
from cuvil_dsl.codegen.cuda import render_cuda, render_kernel

__all__ = ["KernelArg", "RenderedKernel", "check_barriers_uniform", "render_cuda", "render_kernel"]
