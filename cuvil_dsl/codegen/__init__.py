"""Renderers: a :class:`~cuvil_dsl.passes.plan.FusionPlan` to source, one unit per kernel.

Entry point: :func:`render_cuda` (CUDA C for NVRTC). :func:`check_barriers_uniform` checks
that every ``__syncthreads()`` of a rendered kernel stands in block-uniform control flow.
The numba renderer is :func:`cuvil_dsl.codegen.cpu.render_cpu`.
"""

# Names load their module on first use (PEP 562), so the CPU backend, which imports
# ``codegen.cpu``, never loads the CUDA renderer.
_LAZY = {
    "KernelArg": "artifact",
    "RenderedKernel": "artifact",
    "check_barriers_uniform": "barriers",
    "render_cuda": "cuda",
    "render_kernel": "cuda",
}

__all__ = ["KernelArg", "RenderedKernel", "check_barriers_uniform", "render_cuda", "render_kernel"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cuvil_dsl.codegen' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"cuvil_dsl.codegen.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
