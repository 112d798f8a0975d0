"""Read ptxas's ``-v`` report (registers, spills, stack, shared memory, barriers) from a compiler log.

NVRTC and nvcc print the same report with small differences: NVRTC prefixes the
stack/spill line with ``ptxas         .`` and nvcc does not; on sm_90 the ``cmem`` part is
gone and ``bytes smem`` appears only when the kernel uses shared memory. Each field is
therefore matched by its own regex, and a missing field means zero.

Non-inlined device functions get their own ``Function properties for`` block, so the
stack/spill line is attributed to whichever function that header named, never blindly to
the last entry seen.
"""

from __future__ import annotations

import re

from cuvil_dsl.compile.units import KernelResources

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")

# ptxas errors that say the kernel does not fit the machine, not that the source is wrong.
_RESOURCE_ERRORS = (
    re.compile(r"too much shared data"),
    re.compile(r"uses too much local data"),
    re.compile(r"Entry function .* uses too many registers"),
    re.compile(r"catastrophic error: out of memory", re.IGNORECASE),
)


def clean_log(raw: str) -> str:
    """NVRTC separates the front-end and ptxas parts of its log with NUL bytes; drop them."""
    text = raw.replace("\x00", "").rstrip()
    return text + "\n" if text else ""


def parse_report(log: str) -> dict[str, KernelResources]:
    """Every entry function ptxas reported on, by name (extern "C" names are not mangled)."""
    frames: dict[str, tuple[int, int, int]] = {}
    usage: dict[str, tuple[int, int, int]] = {}
    order: list[str] = []
    entry: str | None = None
    properties_of: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1)
            if entry not in order:
                order.append(entry)
            continue
        if m := _PROPERTIES.search(line):
            properties_of = m.group(1)
            continue
        if m := _FRAME.search(line):
            if properties_of is not None:
                frames[properties_of] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        if (m := _REGISTERS.search(line)) and entry is not None:
            smem = _SMEM.search(line)
            barriers = _BARRIERS.search(line)
            usage[entry] = (
                int(m.group(1)),
                int(smem.group(1)) if smem else 0,
                int(barriers.group(1)) if barriers else 0,
            )
    report: dict[str, KernelResources] = {}
    for name in order:
        if name not in usage:
            continue
        registers, shared, barriers = usage[name]
        stack, stores, loads = frames.get(name, (0, 0, 0))
        report[name] = KernelResources(
            name=name,
            registers=registers,
            spill_store_bytes=stores,
            spill_load_bytes=loads,
            stack_bytes=stack,
            shared_bytes=shared,
            barriers=barriers,
        )
    return report


def resource_errors(log: str) -> list[str]:
    """Log lines saying the kernel exceeds a hardware limit (worth a retry with nvcc, never a source bug)."""
    return [line.strip() for line in log.splitlines() if any(p.search(line) for p in _RESOURCE_ERRORS)]


def error_source_lines(log: str, file_name: str) -> list[int]:
    """1-based source lines the front end flagged as errors in ``file_name`` (``name.cu(12): error: ...``)."""
    pattern = re.compile(re.escape(file_name) + r"\((\d+)\): (?:error|catastrophic error)")
    return sorted({int(m.group(1)) for m in pattern.finditer(log)})
