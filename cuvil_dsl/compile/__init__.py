"""Compile service: CUDA C units to CUBIN for one exact arch, with ptxas reports, caching and fallback.

Entry point: :func:`compile_units`. Everything else here supports it or the CLI
(``compile --emit ptx``, ``cache info``/``clear``, ``doctor``) and tests (SASS checks,
log capture).
"""

from cuvil_dsl.compile.admin import cache_clear, cache_info
from cuvil_dsl.compile.breaker import BREAKER, CircuitBreaker
from cuvil_dsl.compile.doctor import DoctorRow, doctor, render_doctor
from cuvil_dsl.compile.log import add_sink, capture, export_counters, prometheus_text, remove_sink
from cuvil_dsl.compile.nvrtc import RESULT_CODES, NvrtcResultInfo, result_info
from cuvil_dsl.compile.ptxas import parse_report
from cuvil_dsl.compile.sass import SassUnavailable, count_instructions, disassemble, find_cuobjdump, has_instruction
from cuvil_dsl.compile.service import compile_units, emit_ptx, stderr_progress
from cuvil_dsl.compile.units import CompiledUnit, CompileUnit, KernelResources

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
