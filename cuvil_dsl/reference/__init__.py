"""The float64 reference executor: the oracle every backend is checked against."""

from cuvil_dsl.reference.executor import HostHooks, eval_op, execute, summarize

__all__ = ["HostHooks", "eval_op", "execute", "summarize"]
