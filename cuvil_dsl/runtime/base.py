"""What every backend (reference, cpu, cuda) offers the driver, the CLI and the harness.

An :class:`Executor` holds one instance of a pipeline for one shape signature: its buffers
are allocated once (an arena with guard bands, on the device or the host), its kernels are
compiled and loaded once. ``run`` performs one checked execution (host statements included),
``time`` times executions without host statements, ``snapshot`` describes the memory.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field

import numpy as np

from cuvil_dsl.reference.executor import HostHooks


@dataclass(frozen=True)
class Target:
    """The spec's ``target`` section, resolved (``backend`` and ``arch`` never ``auto`` here)."""

    backend: str
    arch: str | None = None
    compiler: str = "nvrtc"
    fallback: str = "nvcc"
    fast_math: bool = False
    tf32: bool = False
    options: tuple[str, ...] = ()
    device: int = 0


@dataclass(frozen=True)
class KernelReport:
    name: str
    registers: int | None = None
    spill_bytes: int | None = None
    shared_bytes: int | None = None
    cache_hit: bool | None = None
    compile_ms: float | None = None
    compiler: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k in
                ("name", "registers", "spill_bytes", "cache_hit", "compile_ms") or v is not None}


@dataclass(frozen=True)
class Timing:
    """Per execution of the whole pipeline, in microseconds."""

    samples_us: tuple[float, ...]

    @property
    def iterations(self) -> int:
        return len(self.samples_us)

    def _arr(self) -> np.ndarray:
        return np.asarray(self.samples_us, dtype=np.float64)

    @property
    def p50_us(self) -> float:
        return float(np.percentile(self._arr(), 50)) if self.samples_us else float("nan")

    @property
    def p99_us(self) -> float:
        return float(np.percentile(self._arr(), 99)) if self.samples_us else float("nan")

    @property
    def mean_us(self) -> float:
        return float(np.mean(self._arr())) if self.samples_us else float("nan")

    @property
    def std_us(self) -> float:
        return float(np.std(self._arr())) if self.samples_us else float("nan")

    def to_json(self) -> dict:
        return {
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "mean_us": self.mean_us,
            "std_us": self.std_us,
            "iterations": self.iterations,
        }


@dataclass(frozen=True)
class BufferRecord:
    name: str
    role: str  # input | result | intermediate
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    digest: str  # sha256 of the buffer's bytes
    guard_ok: bool  # both guard bands still hold the canary pattern


@dataclass(frozen=True)
class Snapshot:
    """The arena's layout, a digest of every buffer and the state of every guard band."""

    backend: str
    alignment: int
    guard_bytes: int
    buffers: tuple[BufferRecord, ...] = field(default=())

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "alignment": self.alignment,
            "guard_bytes": self.guard_bytes,
            "buffers": [asdict(b) for b in self.buffers],
        }

    @staticmethod
    def from_json(data: dict) -> "Snapshot":
        return Snapshot(
            data["backend"],
            data["alignment"],
            data["guard_bytes"],
            tuple(BufferRecord(**{**b, "shape": tuple(b["shape"])}) for b in data["buffers"]),
        )

    def damaged_guards(self) -> list[str]:
        return [b.name for b in self.buffers if not b.guard_ok]


def time_on_host(execute, warmup: int, iterations: int) -> Timing:
    """The host clock around each call of ``execute`` (one whole pipeline execution)."""
    import time

    for _ in range(warmup):
        execute()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        execute()
        samples.append((time.perf_counter() - start) * 1e6)
    return Timing(tuple(samples))


def perform_host_statement(stmt, hooks: HostHooks, value_of) -> None:
    """``print`` or ``assert_finite`` on the value ``value_of(name, span)`` returns as
    ``(array, dtype)``; ``sync`` does nothing more here (the caller has already waited)."""
    if stmt.kind == "sync":
        return
    value, dtype = value_of(stmt.arg, stmt.span)
    if stmt.kind == "print":
        hooks.on_print(stmt.arg, dtype, value)
    else:
        hooks.on_assert_finite(stmt.arg, value, stmt)


def digest(data: bytes | memoryview | np.ndarray) -> str:
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).view(np.uint8).tobytes()
    return hashlib.sha256(data).hexdigest()


class Executor(ABC):
    backend: str

    @abstractmethod
    def run(self, inputs: dict[str, np.ndarray], params: dict[str, object],
            hooks: HostHooks | None = None) -> dict[str, np.ndarray]:
        """One full execution; results as host arrays of their declared dtypes."""

    @abstractmethod
    def time(self, warmup: int, iterations: int) -> Timing:
        """Time ``iterations`` executions after ``warmup`` ones, host statements skipped."""

    @abstractmethod
    def snapshot(self) -> Snapshot | None:
        """The memory snapshot after the last execution (None where a backend keeps no arena)."""

    def check_guards(self) -> list[str]:
        """Names of the buffers whose guard bands were written over (empty where there is no arena)."""
        snap = self.snapshot()
        return snap.damaged_guards() if snap is not None else []

    def kernel_reports(self) -> list[KernelReport]:
        return []

    def sources(self) -> dict[str, str]:
        """Generated source per kernel (file name -> text), for records and code-change checks."""
        return {}

    def toolchain(self) -> dict[str, str]:
        """What produced the binaries (compiler and versions, arch, driver), for records."""
        return {"backend": self.backend}

    def close(self) -> None:
        """Release buffers, modules and graphs."""
