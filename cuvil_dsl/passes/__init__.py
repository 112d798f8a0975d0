"""Passes over the typed IR: uniform (host) values, index maps, the fusion planner.

Entry point: :func:`plan_pipeline`, a checked pipeline to a :class:`FusionPlan`.
"""

from cuvil_dsl.passes.configs import apply_overrides, default_config
from cuvil_dsl.passes.fusion import plan_pipeline
from cuvil_dsl.passes.plan import (
    Buffer,
    FusedKernel,
    FusionPlan,
    GraphStep,
    HostStep,
    KernelConfig,
    Launch,
    format_plan,
)
from cuvil_dsl.passes.uniform import split_uniform

__all__ = [
    "Buffer",
    "FusedKernel",
    "FusionPlan",
    "GraphStep",
    "HostStep",
    "KernelConfig",
    "Launch",
    "apply_overrides",
    "default_config",
    "format_plan",
    "plan_pipeline",
    "split_uniform",
]
