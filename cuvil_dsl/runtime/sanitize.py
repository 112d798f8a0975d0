"""``--sanitize TOOL``: run the same command again under NVIDIA compute-sanitizer.

The child is the same ``cuvil-dsl`` invocation without ``--sanitize``, built with ``-lineinfo``
(``CUVIL_LINEINFO=1``, part of the compile cache key) so reports name source lines. The arena is
one raw ``cudaMalloc``, and ``--padding`` puts unmapped bytes around every allocation: memcheck
then also catches overruns that would land in a neighbouring allocation, which it misses without
padding. The report goes to its own log file so the child's standard output (``--json``) stays
clean; the child's exit status is 9 when the sanitizer found errors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cuvil_dsl.diagnostics import Span, UserError, error

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXIT = 9
PADDING_BYTES = 4096
PRINT_LIMIT = 50


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, else the CUDA toolkit's, else the pip wheel's (nvidia-cuda-sanitizer-api)."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = [Path("/usr/local/cuda/bin/compute-sanitizer")]
    try:
        import nvidia

        candidates += [Path(p) / sub / "bin" / "compute-sanitizer" for p in nvidia.__path__ for sub in ("cu13", "cu12")]
    except ImportError:
        pass
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def strip_sanitize(argv: list[str]) -> list[str]:
    """``argv`` without ``--sanitize TOOL`` / ``--sanitize=TOOL`` / a bare ``--sanitize``."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg.startswith("--sanitize="):
            continue
        if arg == "--sanitize":
            skip = i + 1 < len(argv) and argv[i + 1] in TOOLS
            continue
        out.append(arg)
    return out


def sanitizer_command(sanitizer: str, tool: str, log_file: str, argv: list[str]) -> list[str]:
    return [
        sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--padding", str(PADDING_BYTES),
        "--print-limit", str(PRINT_LIMIT), "--log-file", log_file,
        sys.executable, "-m", "cuvil_dsl", *strip_sanitize(argv),
    ]


def rerun_under_sanitizer(argv: list[str], tool: str) -> tuple[int, str]:
    """Run ``cuvil-dsl ARGV`` (``--sanitize`` removed) under compute-sanitizer; ``(exit status, report)``.

    ``argv`` are the command-line arguments after the program name. The child inherits standard
    input, output and error; the report is what the sanitizer logged.
    """
    where = Span.whole_file("<command line>")
    if tool not in TOOLS:
        raise UserError([error("E508", f"unknown sanitizer tool {tool!r}", where, hint=f"use one of {', '.join(TOOLS)}")])
    sanitizer = find_sanitizer()
    if sanitizer is None:
        raise UserError([error(
            "E601", "compute-sanitizer is not installed", where,
            hint="install the CUDA toolkit, or `pip install nvidia-cuda-sanitizer-api`, and put compute-sanitizer on PATH",
        )])
    with tempfile.TemporaryDirectory(prefix="cuvil-sanitize-") as tmp:
        log_file = os.path.join(tmp, "report.txt")
        env = {**os.environ, "CUVIL_LINEINFO": "1"}
        completed = subprocess.run(sanitizer_command(sanitizer, tool, log_file, argv), env=env, check=False)
        report = Path(log_file).read_text(errors="replace") if os.path.exists(log_file) else ""
    return completed.returncode, report
