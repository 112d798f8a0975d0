"""Front end: source text to a checked, typed IR module with diagnostics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuvil_dsl.diagnostics import Diagnostic
from cuvil_dsl.frontend.parser import parse_file, parse_source
from cuvil_dsl.ir.lower import lower
from cuvil_dsl.ir.nodes import Module


@dataclass(frozen=True)
class CheckedFile:
    module: Module | None  # None when there are syntax errors
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return self.module is not None and not any(d.is_error for d in self.diagnostics)


def _check(parsed) -> CheckedFile:
    if parsed.source is None:
        return CheckedFile(None, parsed.diagnostics)
    module, diags = lower(parsed.source, parsed.poisoned)
    return CheckedFile(module, tuple(diags))


def check_source(text: str, path: str = "<string>") -> CheckedFile:
    """Parse and check ``text``; every problem comes back as a diagnostic, in source order."""
    return _check(parse_source(text, path))


def check_file(path: str | Path) -> CheckedFile:
    return _check(parse_file(path))
