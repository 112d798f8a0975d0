"""Every ``CUVIL_*`` environment variable, declared once and typed.

Read a knob's value as ``knobs.values.cache_dir``; the environment is read on each access,
so tests can ``monkeypatch.setenv``. Nothing else in the package reads ``os.environ`` for
its own settings. ``cuvil-dsl doctor`` lists them all with their current values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Knob(Generic[T]):
    env: str
    parse: Callable[[str], T]
    default: Callable[[], T]
    doc: str
    # True when the value changes the binaries we build (it then belongs in the cache key).
    affects_binary: bool = False

    def get(self) -> T:
        raw = os.environ.get(self.env)
        if raw is None or raw == "":
            return self.default()
        try:
            return self.parse(raw)
        except (ValueError, RuntimeError) as exc:  # a bad knob is a user error, reported once
            # (RuntimeError: expanduser of `~nosuchuser/...`)
            from cuvil_dsl.diagnostics import Span, UserError, error

            raise UserError(
                [error("E508", f"bad value {raw!r} for {self.env}: {exc}", Span.whole_file(f"${self.env}"))]
            ) from None


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected 0/1, true/false, yes/no or on/off")


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("expected a positive integer")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("expected a positive number")
    return value


def _default_cache_dir() -> Path:
    # Per user, never the working directory (a cache resolved against the CWD can be poisoned).
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "cuvil-dsl"


def _abs_path(raw: str) -> Path:
    path = Path(raw).expanduser()
    if not path.is_absolute():
        raise ValueError("must be an absolute path (a relative cache path would follow the working directory)")
    return path


_KNOBS: dict[str, Knob] = {}


def _declare(name: str, knob: Knob) -> Knob:
    _KNOBS[name] = knob
    return knob


cache_dir = _declare("cache_dir", Knob("CUVIL_CACHE_DIR", _abs_path, _default_cache_dir, "compile cache directory (absolute)"))
disable_cache = _declare("disable_cache", Knob("CUVIL_DISABLE_CACHE", _bool, lambda: False, "skip the disk cache"))
compile_workers = _declare(
    "compile_workers",
    Knob("CUVIL_COMPILE_WORKERS", _positive_int, lambda: os.cpu_count() or 1, "parallel NVRTC compiles"),
)
compile_timeout = _declare(
    "compile_timeout",
    Knob("CUVIL_COMPILE_TIMEOUT", _positive_float, lambda: 300.0, "seconds before a compile is cancelled"),
)
compile_log = _declare(
    "compile_log",
    Knob("CUVIL_COMPILE_LOG", str, lambda: "", "JSON-lines sink for compile records: a path, 'stderr', or empty"),
)
nvcc = _declare("nvcc", Knob("CUVIL_NVCC", str, lambda: "", "nvcc to use for the fallback (default: found on PATH)"))
breaker_threshold = _declare(
    "breaker_threshold",
    Knob("CUVIL_BREAKER_THRESHOLD", _positive_int, lambda: 3, "NVRTC resource failures that open the breaker"),
)
breaker_window = _declare(
    "breaker_window",
    Knob("CUVIL_BREAKER_WINDOW", _positive_float, lambda: 60.0, "seconds over which failures are counted"),
)
breaker_cooldown = _declare(
    "breaker_cooldown",
    Knob("CUVIL_BREAKER_COOLDOWN", _positive_float, lambda: 300.0, "seconds the breaker stays open"),
)
dump_dir = _declare(
    "dump_dir", Knob("CUVIL_DUMP_DIR", lambda s: Path(s).expanduser(), lambda: None, "write every stage's output here")
)
verify_ir = _declare("verify_ir", Knob("CUVIL_VERIFY", _bool, lambda: False, "verify the IR after every pass"))
traceback = _declare(
    "traceback", Knob("CUVIL_TRACEBACK", _bool, lambda: False, "show full tracebacks for internal errors")
)
lineinfo = _declare(
    "lineinfo", Knob("CUVIL_LINEINFO", _bool, lambda: False, "compile with -lineinfo", affects_binary=True)
)
allow_outside_paths = _declare(
    "allow_outside_paths",
    Knob(
        "CUVIL_ALLOW_OUTSIDE_PATHS",
        _bool,
        lambda: False,
        "let specs name files outside their own folder",
    ),
)


def all_knobs() -> dict[str, Knob]:
    return dict(_KNOBS)


class _Values:
    """Attribute access to current values: ``values.cache_dir``."""

    def __getattr__(self, name: str):
        try:
            return _KNOBS[name].get()
        except KeyError:
            raise AttributeError(name) from None


values = _Values()
