"""The spec file (LANGUAGE.md section 7): load it with positions, bind it, make the inputs.

Typical use, in the order the stages run::

    loaded = load_spec("attention_scores.yaml")       # UserError with every spec problem
    pipeline = select_pipeline(loaded, module)         # the `entry`, or the only pipeline
    binding = bind(loaded, pipeline)                   # sizes, scalar values, input sources
    arrays = make_inputs(binding, pipeline)            # host arrays, reproducible

``loaded.span_of(...)`` lets any later stage point a diagnostic at the spec's YAML lines.
"""

from cuvil_dsl.spec import models
from cuvil_dsl.spec.binding import (
    Binding,
    FileSource,
    GeneratedSource,
    InputSource,
    bind,
    check_kernel_names,
    select_pipeline,
)
from cuvil_dsl.spec.inputs import make_inputs
from cuvil_dsl.spec.loader import LoadedSpec, load_spec
from cuvil_dsl.spec.models import Spec

__all__ = [
    "Binding",
    "FileSource",
    "GeneratedSource",
    "InputSource",
    "LoadedSpec",
    "Spec",
    "bind",
    "check_kernel_names",
    "load_spec",
    "make_inputs",
    "models",
    "select_pipeline",
]
