"""nvcc as the second compiler: used when NVRTC cannot be loaded, fails for a resource reason,
or the circuit breaker says NVRTC has been failing; or directly with ``compiler="nvcc"``.

It costs about 0.25 s of process start-up per unit over NVRTC, which is why it is only the
fallback. The options list is the one NVRTC gets: every option the service adds
(``-arch=sm_XX``, ``-std=c++17``, ``-Xptxas=-v``, ``-I...``, ``--use_fast_math``,
``-lineinfo``, ``-maxrregcount=N``) is spelled the same way for both compilers.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from cuvil_dsl import knobs
from cuvil_dsl.compile.units import ELF_MAGIC

_DEFAULT = "/usr/local/cuda/bin/nvcc"


class NvccUnavailable(Exception):
    """No usable nvcc: not configured, not on PATH, not at /usr/local/cuda."""


class NvccFailure(Exception):
    """nvcc exited non-zero, timed out, or wrote no valid CUBIN; ``log`` is its merged output."""

    def __init__(self, message: str, log: str, timed_out: bool = False):
        self.log = log
        self.timed_out = timed_out
        super().__init__(message)


def find_nvcc() -> str:
    """``CUVIL_NVCC`` if set, else ``nvcc`` on PATH, else /usr/local/cuda/bin/nvcc."""
    configured = knobs.values.nvcc
    if configured:
        path = shutil.which(configured)
        if path is None:
            raise NvccUnavailable(f"CUVIL_NVCC={configured!r} is not an executable")
        return path
    path = shutil.which("nvcc") or (_DEFAULT if os.access(_DEFAULT, os.X_OK) else None)
    if path is None:
        raise NvccUnavailable("nvcc not found (set CUVIL_NVCC, put it on PATH, or install the CUDA toolkit)")
    return path


@functools.lru_cache(maxsize=8)
def version_text(nvcc: str) -> str:
    """The whole ``nvcc --version`` text: it names the build, so it goes into cache keys verbatim."""
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NvccUnavailable(f"`{nvcc} --version` failed: {exc}") from None
    return done.stdout.strip()


def version(nvcc: str) -> str:
    """``"13.0.88"`` from the ``release 13.0, V13.0.88`` line (the whole text if the format changes)."""
    text = version_text(nvcc)
    m = re.search(r"release [\d.]+, V([\d.]+)", text)
    if m:
        return m.group(1)
    return text.splitlines()[-1] if text else "unknown"


@functools.lru_cache(maxsize=8)
def supported_archs(nvcc: str) -> tuple[int, ...]:
    """The ``sm_XX`` numbers this nvcc can build (used to check the arch when NVRTC is absent)."""
    try:
        done = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NvccUnavailable(f"`{nvcc} --list-gpu-code` failed: {exc}") from None
    return tuple(sorted({int(m) for m in re.findall(r"sm_(\d+)", done.stdout)}))


def compile_cubin(source: str, program_name: str, options: tuple[str, ...], timeout: float) -> tuple[bytes, str]:
    """CUBIN bytes and nvcc's output (with the ptxas report), built in a private temporary folder.

    On timeout the whole process group is killed, since nvcc leaves cicc and ptxas running
    if only nvcc itself dies.
    """
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(prefix="cuvil-nvcc-") as tmp:
        src = Path(tmp) / program_name
        src.write_text(source, encoding="utf-8")
        out = Path(tmp) / "out.cubin"
        cmd = [nvcc, "-cubin", *options, "-o", str(out), program_name]
        proc = subprocess.Popen(
            cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
            raise NvccFailure(f"nvcc did not finish within {timeout:g} s", log or "", timed_out=True) from None
        log = log or ""
        if proc.returncode != 0:
            raise NvccFailure(f"nvcc exited with status {proc.returncode}", log)
        try:
            cubin = out.read_bytes()
        except OSError as exc:
            raise NvccFailure(f"nvcc wrote no CUBIN: {exc}", log) from None
    if not cubin.startswith(ELF_MAGIC):
        raise NvccFailure("nvcc wrote a file that is not an ELF CUBIN", log)
    return cubin, log
