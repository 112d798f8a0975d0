"""Compile service: CUDA C units to CUBIN for one exact arch, with ptxas reports, caching and fallback.

Entry point: :func:`compile_units`. Everything else here supports it or the CLI
(``compile --emit ptx``, ``cache info``/``clear``, ``doctor``) and tests (SASS checks,
log capture).
"""

import sys
import types

# Names load their module on first use (PEP 562): the CPU backend needs only ``compile.cache``,
# and importing NVRTC, nvcc, the doctor and the service for it cost 30-40 ms of every start-up.
_LAZY = {
    "cache_clear": "admin",
    "cache_info": "admin",
    "BREAKER": "breaker",
    "CircuitBreaker": "breaker",
    "DoctorRow": "doctor",
    "doctor": "doctor",
    "render_doctor": "doctor",
    "add_sink": "log",
    "capture": "log",
    "export_counters": "log",
    "prometheus_text": "log",
    "remove_sink": "log",
    "RESULT_CODES": "nvrtc",
    "NvrtcResultInfo": "nvrtc",
    "result_info": "nvrtc",
    "parse_report": "ptxas",
    "SassUnavailable": "sass",
    "count_instructions": "sass",
    "disassemble": "sass",
    "find_cuobjdump": "sass",
    "has_instruction": "sass",
    "compile_units": "service",
    "emit_ptx": "service",
    "stderr_progress": "service",
    "CompiledUnit": "units",
    "CompileUnit": "units",
    "KernelResources": "units",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cuvil_dsl.compile' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"cuvil_dsl.compile.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """Keeps ``cuvil_dsl.compile.doctor`` the function, as the eager imports had it.

    Importing a submodule sets it as an attribute of its package; for ``doctor`` that would hide
    the function of the same name whenever the submodule was imported before the name was used.
    """

    def __setattr__(self, name: str, value) -> None:
        if name == "doctor" and isinstance(value, types.ModuleType):
            return  # the submodule stays reachable through sys.modules
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "BREAKER",
    "CircuitBreaker",
    "CompileUnit",
    "CompiledUnit",
    "DoctorRow",
    "KernelResources",
    "NvrtcResultInfo",
    "RESULT_CODES",
    "SassUnavailable",
    "add_sink",
    "cache_clear",
    "cache_info",
    "capture",
    "compile_units",
    "count_instructions",
    "disassemble",
    "doctor",
    "emit_ptx",
    "export_counters",
    "find_cuobjdump",
    "has_instruction",
    "parse_report",
    "prometheus_text",
    "remove_sink",
    "render_doctor",
    "result_info",
    "stderr_progress",
]
