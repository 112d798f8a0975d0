"""cuvil-dsl: fused GPU operator pipelines from a small declarative language."""

__version__ = "0.1.0"

import os as _os

# OpenBLAS (NumPy's BLAS) keeps its worker threads spinning for about 2^28 cycles after every call, on the cores the
# CPU backend's numba kernels run on next, and the two thread pools thrash: on 2 cores attention_scores took 7.9 ms
# instead of 1.4-2.5 (benchmarks/NOTES.md, "The CPU backend and BLAS's threads"). OpenBLAS reads this variable when it
# loads, so it counts when cuvil_dsl is imported before NumPy (the command line always is); a value already set wins.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

# The Python API is loaded on first use, so `import cuvil_dsl` (and the CLI's startup) stays cheap.
_LAZY = {"load": "load", "Program": "Program", "CompiledPipeline": "CompiledPipeline"}


def __getattr__(name: str):
    if name in _LAZY:
        from cuvil_dsl import api

        return getattr(api, _LAZY[name])
    raise AttributeError(f"module 'cuvil_dsl' has no attribute {name!r}")
