"""One diagnostic type for every stage, rendered with a caret, as JSON or as SARIF.

Every user-facing problem is a :class:`Diagnostic`: a stable code (``E204``), a severity,
a message, a :class:`Span` (file, 1-based line and column, end position; columns count
characters) and an optional hint that says how to fix it. Stages collect diagnostics and
raise :class:`UserError` once; bugs in the tool are :class:`InternalError` and are never
shown to a user as a bare traceback.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Iterable, Sequence

from cuvil_dsl import __version__


@dataclass(frozen=True, order=True)
class Span:
    """A range of source text. ``end_column`` is exclusive; lines and columns are 1-based."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    @staticmethod
    def point(file: str, line: int, column: int, width: int = 1) -> "Span":
        return Span(file, line, column, line, column + max(width, 1))

    @staticmethod
    def whole_file(file: str) -> "Span":
        return Span(file, 1, 1, 1, 1)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


# The meaning of every code: LANGUAGE.md section 6, plus the ones this project adds.
CODES: dict[str, str] = {
    "E100": "syntax error",
    "E201": "undefined name",
    "E202": "name bound twice",
    "E203": "dtype mismatch or illegal mix",
    "E204": "shape mismatch",
    "E205": "axis out of range",
    "E206": "unknown function",
    "E207": "wrong arguments",
    "E208": "declared result never bound",
    "E209": "assignment to an input parameter",
    "E301": "host statement inside a graph",
    "E302": "nested graph, or a graph inside a kernel",
    "E303": "nested kernel block",
    "E401": "kernel block cannot be one kernel",
    "E402": "kernel exceeds its resource budget (registers, spills)",
    "E403": "host statement inside a kernel block",
    "E501": "unknown or misspelled key in a spec",
    "E502": "symbol without a size",
    "E503": "invalid launch settings",
    "E504": "target the compiler cannot build for",
    "E505": "file named in a spec not found or unreadable",
    "E506": "input data does not match its declaration",
    "E507": "scalar parameter without a value",
    "E508": "invalid value in a spec",
    "E509": "sizes beyond what the machine can hold",
    "E601": "backend not available",
    "E602": "compilation failed",
    "W601": "input never used",
    "W602": "value computed but never used",
}


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    span: Span
    severity: Severity = Severity.ERROR
    hint: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def sort_key(self) -> tuple:
        return (self.span.file, self.span.line, self.span.column, self.code)

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "file": self.span.file,
            "line": self.span.line,
            "column": self.span.column,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column,
            **({"hint": self.hint} if self.hint else {}),
        }


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The hint for a misspelt name: the closest of ``known`` by difflib's ratio (0.6 at least), else None."""
    import difflib  # only on an error's path

    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean `{close[0]}`?" if close else None


def error(code: str, message: str, span: Span, hint: str | None = None) -> Diagnostic:
    return Diagnostic(code, message, span, Severity.ERROR, hint)


def warning(code: str, message: str, span: Span, hint: str | None = None) -> Diagnostic:
    return Diagnostic(code, message, span, Severity.WARNING, hint)


class CuvilError(Exception):
    """Base of every exception this package raises on purpose."""


class UserError(CuvilError):
    """Problems in the user's program, spec, data or invocation; carries diagnostics."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = tuple(sorted(diagnostics, key=Diagnostic.sort_key))
        super().__init__("\n".join(f"{d.span}: {d.severity.value}[{d.code}]: {d.message}" for d in self.diagnostics))

    def __reduce__(self):
        return (type(self), (self.diagnostics,))


class RunFailure(CuvilError):
    """Something found by executing (a numeric check, assert_finite, a budget, guard bands)."""


class InternalError(CuvilError):
    """A bug in cuvil-dsl itself. The message asks for a report."""


def raise_if_errors(diagnostics: Iterable[Diagnostic]) -> None:
    diags = list(diagnostics)
    if any(d.is_error for d in diags):
        raise UserError(diags)


# Largest source file read (.cuvil or spec, or to show a diagnostic's line): parsing runs at
# roughly 100-200 KB/s, so this bounds the time of any `check`.
MAX_SOURCE_BYTES = 4 << 20


def read_source_bytes(path: Path, what: str = "source") -> bytes | str:
    """The bytes of a regular file of at most :data:`MAX_SOURCE_BYTES`, or why not (a message).

    Checked before opening: a FIFO would block the read for ever and a link to a device such as
    /dev/zero would never end, so a `check` over a tree with such a file planted in it would hang.
    """
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            return f"cannot read {path}: not a regular file"
        if st.st_size > MAX_SOURCE_BYTES:
            return (f"cannot read {path}: the {what} is {st.st_size / 2**20:.1f} MiB, more than the "
                    f"{MAX_SOURCE_BYTES // 2**20} MiB a file may have")
        return path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        return f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"


class SourceCache:
    """Source text by file name, so diagnostics can show the offending line."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._lines: dict[str, list[str]] = {}

    def add(self, file: str, text: str) -> None:
        self._texts[file] = text
        self._lines.pop(file, None)

    def line(self, file: str, line: int) -> str | None:
        """One line of ``file``; the split is kept, so rendering thousands of diagnostics of a
        large file costs one split, not one per diagnostic."""
        lines = self._lines.get(file)
        if lines is None:
            text = self._texts.get(file)
            if text is None:
                data = read_source_bytes(Path(file))  # never a FIFO or a device
                if isinstance(data, str):
                    return None
                text = self._texts[file] = data.decode("utf-8", errors="replace")
            lines = self._lines[file] = text.splitlines()
        if 1 <= line <= len(lines):
            return lines[line - 1]
        return None


SOURCES = SourceCache()


def render(diag: Diagnostic, sources: SourceCache = SOURCES, color: bool = False) -> str:
    """``FILE:LINE:COL: error[CODE]: message``, then the source line and a caret under the span."""
    sev = diag.severity.value
    if color:
        tint = "\033[1;31m" if diag.is_error else "\033[1;33m"
        head = f"\033[1m{diag.span}:\033[0m {tint}{sev}[{diag.code}]\033[0m: \033[1m{diag.message}\033[0m"
    else:
        head = f"{diag.span}: {sev}[{diag.code}]: {diag.message}"
    out = [head]
    text = sources.line(diag.span.file, diag.span.line)
    if text is not None:
        gutter = str(diag.span.line)
        pad = " " * len(gutter)
        shown = text.expandtabs(4) if "\t" in text else text
        prefix = text[: diag.span.column - 1].expandtabs(4) if "\t" in text else text[: diag.span.column - 1]
        if diag.span.end_line == diag.span.line:
            width = max(1, diag.span.end_column - diag.span.column)
        else:
            width = max(1, len(text) - diag.span.column + 1)
        out.append(f"{pad} |")
        out.append(f"{gutter} | {shown}")
        out.append(f"{pad} | {' ' * len(prefix)}{'^' * width}")
    for note in diag.notes:
        out.append(f"  = note: {note}")
    if diag.hint:
        out.append(f"  = help: {diag.hint}")
    return "\n".join(out)


def to_json(diags: Iterable[Diagnostic]) -> str:
    return json.dumps([d.to_json() for d in diags], indent=2)


def to_sarif(diags: Iterable[Diagnostic]) -> str:
    """SARIF 2.1.0, one run, one rule per code used, so code-scanning tools show findings inline."""
    diags = list(diags)
    used = sorted({d.code for d in diags})
    rules = [
        {
            "id": code,
            "name": CODES.get(code, code).replace(" ", "_"),
            "shortDescription": {"text": CODES.get(code, code)},
            "helpUri": f"https://github.com/cuvil-dsl/cuvil-dsl/blob/main/docs/diagnostics.md#{code.lower()}",
        }
        for code in used
    ]
    results = []
    for d in diags:
        results.append(
            {
                "ruleId": d.code,
                "ruleIndex": used.index(d.code),
                "level": "error" if d.is_error else "warning",
                "message": {"text": d.message + (f" ({d.hint})" if d.hint else "")},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": Path(d.span.file).as_posix()},
                            "region": {
                                "startLine": d.span.line,
                                "startColumn": d.span.column,
                                "endLine": d.span.end_line,
                                "endColumn": d.span.end_column,
                            },
                        }
                    }
                ],
            }
        )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "cuvil-dsl",
                        "version": __version__,
                        "informationUri": "https://github.com/cuvil-dsl/cuvil-dsl",
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2)
