"""cuvil-dsl: fused GPU operator pipelines from a small declarative language."""

__version__ = "0.1.0"

# The Python API is loaded on first use, so `import cuvil_dsl` (and the CLI's startup) stays cheap.
_LAZY = {"load": "load", "Program": "Program", "CompiledPipeline": "CompiledPipeline"}


def __getattr__(name: str):
    if name in _LAZY:
        from cuvil_dsl import api

        return getattr(api, _LAZY[name])
    raise AttributeError(f"module 'cuvil_dsl' has no attribute {name!r}")
