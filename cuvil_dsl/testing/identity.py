"""What produced a recording: the toolchain and the machine, and whether a replay matches them.

A replay may demand bit-for-bit equal results only when nothing that can change a single bit
differs from the recording: the backend, the arch, every compiler and library version that
shapes the numbers (numba's LLVM, NVRTC, NumPy's SIMD kernels) and the processor itself (numba
and NumPy pick vector widths from the host CPU, and a parallel reduction's order follows the
thread count). Anything else gets the tolerance rule, and the replay says which item differed.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

from cuvil_dsl import __version__
from cuvil_dsl.runtime.base import Executor

# The packages whose versions can change a backend's numbers (the reference backend is NumPy).
BACKEND_PACKAGES: dict[str, tuple[str, ...]] = {
    "reference": ("numpy", "ml_dtypes"),
    "cpu": ("numpy", "ml_dtypes", "numba", "llvmlite"),
    "cuda": ("numpy", "ml_dtypes", "cupy-cuda13x", "nvidia-cuda-nvrtc"),
}


def toolchain(executor: Executor) -> dict[str, str]:
    """cuvil-dsl, Python and the backend's packages, overlaid with what the executor reports
    (compiler, NVRTC and driver versions, arch)."""
    found: dict[str, str] = {"cuvil_dsl": __version__, "python": platform.python_version()}
    for package in BACKEND_PACKAGES.get(executor.backend, ()):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    found.update({str(k): str(v) for k, v in executor.toolchain().items()})
    return found


def machine(backend: str, device: int = 0) -> dict[str, str]:
    """The processor (and, for the cuda backend, the GPU and driver) the numbers came from; for the host backends
    also the vector extensions NumPy dispatches to (:func:`_simd`): a virtual machine may name an AVX2 and an
    AVX-512 processor alike ("AMD EPYC"), and NumPy's float64 ``exp`` and ``tanh`` differ by an ulp between them."""
    found = {"cpu": _cpu_model(), "cores": str(os.cpu_count() or 1)}
    if backend in ("reference", "cpu"):
        found["simd"] = _simd()
    if backend == "cuda":
        from cupy.cuda import runtime

        from cuvil_dsl.runtime.device import device_info

        found["gpu"] = device_info(device).name
        found["driver"] = str(runtime.driverGetVersion())
    return found


def _simd() -> str:
    """NumPy's dispatch targets that this processor has (``numpy.show_runtime``'s "found"), e.g. "X86_V3 X86_V4
    AVX512_ICL"; "unknown" where NumPy does not say."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:
        return "unknown"
    return " ".join(f for f in __cpu_dispatch__ if __cpu_features__.get(f)) or "baseline"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def differences(recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]]) -> list[str]:
    """Each item of the identity that differs, as ``section.key: old -> new``."""
    changes = []
    for section in sorted(set(recorded) | set(current)):
        old, new = recorded.get(section) or {}, current.get(section) or {}
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                changes.append(f"{section}.{key}: {old.get(key, 'absent')} -> {new.get(key, 'absent')}")
    return changes
