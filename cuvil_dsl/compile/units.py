"""The values that cross the compile service's boundary: what goes in, what comes out.

They are plain frozen dataclasses so a unit can be hashed into a cache key, pickled to a
worker process, and compared in tests without any compiler loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

ELF_MAGIC = b"\x7fELF"  # every CUBIN is an ELF file; anything else is never accepted as one

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Compiler = Literal["nvrtc", "nvcc"]
CacheOutcome = Literal["miss", "hit-memory", "hit-disk"]


@dataclass(frozen=True)
class CompileUnit:
    """One CUDA C translation unit with one or more ``extern "C" __global__`` kernels.

    ``name`` becomes the NVRTC program name (``<name>.cu``), so compiler errors point at a
    file the user can find under the cache's ``failed/`` folder; it must be a C identifier
    because it is also used in file names and logs.
    """

    name: str
    source: str
    kernels: tuple[str, ...]
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _IDENT.fullmatch(self.name):
            raise ValueError(f"compile unit name {self.name!r} is not a C identifier")
        if not self.kernels:
            raise ValueError(f"compile unit {self.name!r} declares no kernels")
        for kernel in self.kernels:
            if not _IDENT.fullmatch(kernel):
                raise ValueError(f"kernel name {kernel!r} in unit {self.name!r} is not a C identifier")
        if not all(isinstance(opt, str) for opt in self.options):
            raise ValueError(f"options of unit {self.name!r} must be strings")


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one entry function (bytes and counts, all per thread/block as ptxas says)."""

    name: str
    registers: int
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    shared_bytes: int = 0
    barriers: int = 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "registers": self.registers,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "stack_bytes": self.stack_bytes,
            "shared_bytes": self.shared_bytes,
            "barriers": self.barriers,
        }

    @staticmethod
    def from_json(data: dict) -> "KernelResources":
        return KernelResources(
            name=str(data["name"]),
            registers=int(data["registers"]),
            spill_store_bytes=int(data["spill_store_bytes"]),
            spill_load_bytes=int(data["spill_load_bytes"]),
            stack_bytes=int(data["stack_bytes"]),
            shared_bytes=int(data["shared_bytes"]),
            barriers=int(data["barriers"]),
        )


@dataclass(frozen=True)
class BuildArtifact:
    """A compiled binary and what is known about how it was made; this is what the cache stores.

    It carries no :class:`CompileUnit`, so one artifact can serve every caller that asks
    for the same key.
    """

    cubin: bytes
    resources: dict[str, KernelResources]
    log: str
    compiler: Compiler
    compiler_version: str
    compile_ms: float
    nvrtc_result: int | None = None
    fallback: str | None = None


@dataclass(frozen=True)
class CompiledUnit:
    """The result for one unit: CUBIN bytes for ``arch`` plus ptxas's report per kernel.

    ``compile_ms`` is what this request cost (a cache hit is microseconds); ``cache`` says
    which layer answered; ``fallback`` names why nvcc built it instead of NVRTC, if it did.
    """

    unit: CompileUnit
    arch: str
    cubin: bytes = field(repr=False)
    resources: dict[str, KernelResources]
    compiler: Compiler
    compiler_version: str
    cache_hit: bool
    compile_ms: float
    log: str = field(repr=False)
    key: str
    cache: CacheOutcome = "miss"
    fallback: str | None = None
