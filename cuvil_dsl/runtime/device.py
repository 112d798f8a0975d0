"""What the GPU is: availability, arch, size. Importable and callable on machines without one.

``gpu_available`` decides the ``auto`` backend, so it must answer False (never raise) where
CuPy, the driver or a device is missing. Everything else assumes a device and reads it once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


def gpu_available() -> bool:
    """True when CuPy can use at least one CUDA device here."""
    try:
        import cupy

        return bool(cupy.is_available())
    except Exception:  # ImportError, a missing libcuda, an insufficient driver: all mean "no GPU"
        return False


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    total_memory: int

    @property
    def arch(self) -> str:
        """``sm_90`` for compute capability 9.0: the exact arch CUBINs are built for."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


@functools.cache
def device_info(ordinal: int = 0) -> DeviceInfo:
    """Properties of GPU ``ordinal`` (read once per process: they never change while it runs)."""
    from cupy.cuda import runtime

    props = runtime.getDeviceProperties(ordinal)
    name = props["name"]
    return DeviceInfo(
        ordinal=ordinal,
        name=name.decode() if isinstance(name, bytes) else str(name),
        compute_capability=(int(props["major"]), int(props["minor"])),
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        total_memory=int(props["totalGlobalMem"]),
    )


def device_arch(ordinal: int = 0) -> str:
    return device_info(ordinal).arch


def max_dynamic_shared_bytes(ordinal: int = 0) -> int:
    """The most dynamic shared memory one block may opt in to on this device."""
    from cupy.cuda import runtime

    return int(runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal))


def runs_on(arch: str, ordinal: int = 0) -> bool:
    """Whether a CUBIN built for ``arch`` (``sm_90``, ``sm_90a``) runs on GPU ``ordinal``.

    SASS runs on the same major version with an equal or newer minor; the ``a``/``f`` variants
    only on exactly their own arch.
    """
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    if not digits:
        return False
    major, minor = int(digits[:-1] or 0), int(digits[-1])
    have = device_info(ordinal).compute_capability
    if not arch.removeprefix("sm_").isdigit():
        return have == (major, minor)
    return have[0] == major and have[1] >= minor
