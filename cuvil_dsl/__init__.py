"""cuvil-dsl: fused GPU operator pipelines from a small declarative language."""

__version__ = "0.1.0"
