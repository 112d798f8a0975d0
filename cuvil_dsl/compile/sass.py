"""SASS inspection with ``cuobjdump -sass``: count barriers, check for tensor-core instructions.

Tests use it to prove what the generated code really does (one ``BAR.SYNC`` per
``__syncthreads``, ``HGMMA`` on sm_90) without a GPU. cuobjdump comes from the
``nvidia-cuda-cuobjdump`` wheel (not on PATH; located through cuda.pathfinder) and needs
``nvdisasm`` from ``nvidia-cuda-nvdisasm`` beside it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from cuvil_dsl.compile.units import ELF_MAGIC
from cuvil_dsl.diagnostics import CuvilError

# "/*0070*/   @!P0 BAR.SYNC.DEFER_BLOCKING 0x0 ;" -> the opcode after the optional predicate
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)", re.M)


class SassUnavailable(CuvilError):
    """cuobjdump is missing or could not disassemble the file."""


def find_cuobjdump() -> str | None:
    """The pip wheel's cuobjdump, else one on PATH; ``None`` when neither exists."""
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_binary_utility("cuobjdump")
    except Exception:  # pathfinder absent or failing: try PATH
        found = None
    return found or shutil.which("cuobjdump")


def disassemble(cubin: bytes, function: str | None = None) -> str:
    """The ``cuobjdump -sass`` text of ``cubin`` (optionally one function's only)."""
    tool = find_cuobjdump()
    if tool is None:
        raise SassUnavailable(
            "cuobjdump not found; install it with `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`"
        )
    if not cubin.startswith(ELF_MAGIC):
        raise SassUnavailable("not a CUBIN (no ELF header)")
    with tempfile.TemporaryDirectory(prefix="cuvil-sass-") as tmp:
        path = Path(tmp) / "code.cubin"
        path.write_bytes(cubin)
        cmd = [tool, "-sass", *(["-fun", function] if function else []), str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SassUnavailable(f"cuobjdump failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done.stdout


def instructions(sass: str) -> list[str]:
    """Opcodes in order, with modifiers: ``["LDC", "S2R", ..., "BAR.SYNC.DEFER_BLOCKING", "EXIT"]``."""
    return _INSTRUCTION.findall(sass)


def count_instructions(sass: str, pattern: str) -> int:
    """How many instructions' opcodes start with regex ``pattern`` (``r"BAR\\.SYNC"``, ``"HGMMA"``)."""
    regex = re.compile(pattern)
    return sum(1 for opcode in instructions(sass) if regex.match(opcode))


def has_instruction(sass: str, pattern: str) -> bool:
    return count_instructions(sass, pattern) > 0
