"""Shared helpers of the hardening tests: run the CLI in-process under a time limit and check
that whatever it was fed, it answered like a tool and not like a crashed program.

The property every fuzz test and every corpus case asserts (:func:`assert_robust`):

- the exit status is 0, 1 or 2: never 3 (an internal error), never an escaped exception;
- standard error holds no Python traceback and no "internal error" banner;
- with ``--json`` / ``--format json`` / ``--format sarif``, standard output is one JSON document;
- the call finished within its time limit (a SIGALRM timer raises :class:`Hang`, which derives
  from BaseException so the CLI's own catch-all cannot turn a hang into an exit status).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from cuvil_dsl.cli import main

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
ROOT = HERE.parents[1]

# Long fuzz campaigns are opt-in: CUVIL_FUZZ=1 (and CUVIL_FUZZ_EXAMPLES=N to size them).
LONG_FUZZ = os.environ.get("CUVIL_FUZZ") == "1"
LONG_EXAMPLES = int(os.environ.get("CUVIL_FUZZ_EXAMPLES", "2000"))


class Hang(BaseException):
    """A call ran past its time limit (raised from the SIGALRM handler)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Hang` in the main thread if the body runs longer than ``seconds``."""

    def expired(signum, frame):
        raise Hang(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class CliResult:
    args: list[str]
    rc: int
    out: str
    err: str
    seconds: float

    def describe(self) -> str:
        return (f"cuvil-dsl {' '.join(self.args)} -> {self.rc} in {self.seconds:.2f} s\n"
                f"--- stdout ---\n{self.out[-3000:]}\n--- stderr ---\n{self.err[-3000:]}")


def run_cli(args: list[str], limit: float = 60.0) -> CliResult:
    """``cuvil_dsl.cli.main(args)`` with stdout and stderr captured, under a time limit."""
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_limit(limit):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse refusing the command line: status 2
            rc = exc.code if isinstance(exc.code, int) else 2
    return CliResult([str(a) for a in args], rc, out.getvalue(), err.getvalue(), time.perf_counter() - started)


def wants_json(args: list[str]) -> bool:
    joined = " ".join(str(a) for a in args)
    return "--json" in joined or "--format json" in joined or "--format sarif" in joined


def assert_robust(result: CliResult, limit: float | None = None) -> None:
    """The hardening property (module docstring)."""
    assert result.rc in (0, 1, 2), result.describe()
    assert "Traceback (most recent call last)" not in result.err, result.describe()
    assert "internal error" not in result.err, result.describe()
    if wants_json(result.args):
        try:
            json.loads(result.out)
        except ValueError as exc:
            raise AssertionError(f"stdout is not one JSON document ({exc})\n{result.describe()}") from None
    if limit is not None:
        assert result.seconds < limit, result.describe()


def robust(args: list[str], limit: float = 60.0) -> CliResult:
    """Run and assert the property in one step."""
    result = run_cli(args, limit)
    assert_robust(result)
    return result


def codes(result: CliResult) -> list[str]:
    """Diagnostic codes in a ``--format json`` / ``--json`` answer."""
    data = json.loads(result.out)
    items = data if isinstance(data, list) else data.get("diagnostics", [])
    return [d["code"] for d in items]
