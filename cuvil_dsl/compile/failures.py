"""Turn a failed compile into an E602 the user can act on.

The generated CUDA is not a file the user ever wrote, so the message has to carry
everything: what each compiler said, the exact options, and the numbered source. The
source and logs are also saved (under the cache's ``failed/`` folder) so the user can
rerun the compiler by hand or attach them to a bug report; the diagnostic's span points
into that saved file at the first line the compiler flagged.
"""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cuvil_dsl.compile.ptxas import error_source_lines
from cuvil_dsl.compile.units import CompileUnit
from cuvil_dsl.diagnostics import Diagnostic, Span, UserError, error

SOURCE_LINES_SHOWN = 80
CONTEXT = 8
DEFAULT_HINT = (
    "cuvil-dsl generated this CUDA source; if your program is valid, this is a bug in cuvil-dsl: "
    "please report it with the saved .cu and .log files"
)


@dataclass(frozen=True)
class Attempt:
    """One compiler's try: which compiler and version, a one-line ``outcome``, and its log."""

    compiler: str
    version: str
    outcome: str
    log: str

    @property
    def who(self) -> str:
        label = "NVRTC" if self.compiler == "nvrtc" else self.compiler
        return f"{label} {self.version}".strip()


def numbered_source(source: str, marks: list[int], limit: int = SOURCE_LINES_SHOWN) -> str:
    """Source with line numbers and ``>`` on flagged lines; long sources show only windows around them."""
    lines = source.splitlines()
    width = len(str(len(lines)))
    if len(lines) <= limit:
        shown = list(range(1, len(lines) + 1))
    elif marks:
        shown = sorted({n for m in marks for n in range(m - CONTEXT, m + CONTEXT + 1) if 1 <= n <= len(lines)})
    else:
        shown = list(range(1, limit + 1))
    out: list[str] = []
    previous = 0
    for number in shown:
        if number != previous + 1:
            out.append(f"{'':>{width + 1}} ...")
        flag = ">" if number in marks else " "
        out.append(f"{flag}{number:>{width}} | {lines[number - 1]}")
        previous = number
    if previous < len(lines):
        out.append(f"{'':>{width + 1}} ... ({len(lines) - previous} more lines in the saved file)")
    return "\n".join(out)


def _save(
    unit: CompileUnit, key: str, options: tuple[str, ...], attempts: list[Attempt], folder: Path | None
) -> tuple[Path | None, Path | None, str | None]:
    """Write ``<unit>-<key>.cu`` and ``.log``; returns their paths, or the reason they could not be saved."""
    try:
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="cuvil-failed-"))
        else:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        stem = f"{unit.name}-{key[:12]}"
        cu_path = folder / f"{stem}.cu"
        log_path = folder / f"{stem}.log"
        cu_path.write_text(unit.source, encoding="utf-8")
        parts = [f"options: {shlex.join(options)}\n"]
        for attempt in attempts:
            parts.append(f"=== {attempt.who}: {attempt.outcome}\n{attempt.log}")
        log_path.write_text("\n".join(parts), encoding="utf-8")
        return cu_path, log_path, None
    except OSError as exc:
        return None, None, str(exc)


def compile_error(
    unit: CompileUnit,
    arch: str,
    key: str,
    options: tuple[str, ...],
    attempts: list[Attempt],
    failed_dir: Path | None,
    hint: str | None = None,
) -> UserError:
    """An E602 :class:`UserError` naming the unit, each attempt with its log, the options and the source."""
    cu_path, log_path, save_error = _save(unit, key, options, attempts, failed_dir)
    marks = sorted({n for a in attempts for n in error_source_lines(a.log, f"{unit.name}.cu")})
    parts = [f"cannot compile unit '{unit.name}' (kernels: {', '.join(unit.kernels)}) for {arch}"]
    for attempt in attempts:
        parts.append(f"{attempt.who}: {attempt.outcome}")
    parts.append(f"options: {shlex.join(options)}")
    for attempt in attempts:
        parts.append(f"--- {attempt.who} log ---\n{attempt.log.rstrip() or '(empty)'}")
    if cu_path is not None:
        where = f"saved to {cu_path}; compiler logs in {log_path}"
    else:
        where = f"could not be saved: {save_error}"
    parts.append(f"--- CUDA source ({where}) ---\n{numbered_source(unit.source, marks)}")
    file = str(cu_path) if cu_path is not None else f"<{unit.name}.cu>"
    span = Span.point(file, marks[0], 1) if marks else Span.whole_file(file)
    diag: Diagnostic = error("E602", "\n".join(parts), span, hint or DEFAULT_HINT)
    return UserError([diag])
