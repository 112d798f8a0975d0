"""The checks of a replay, each a pure function from recorded and replayed data to a verdict.

Every verdict names its rule: ``exact`` (bit for bit), ``tolerance`` (the spec's rtol/atol, when
the backend, arch, toolchain or machine differ from the recording's), ``noise`` (timing, see
:mod:`cuvil_dsl.testing.timing`), ``budget`` (the spec's limits) or ``skipped`` (the check does
not apply to this replay, and the message says why). Messages name the case's input, result,
buffer or kernel that differs, so a failure can be acted on without opening the case.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvil_dsl.check import compare
from cuvil_dsl.runtime.base import BufferRecord, Snapshot
from cuvil_dsl.testing.case import ArrayEntry

MAX_DIFF_LINES = 200


@dataclass(frozen=True)
class CheckResult:
    name: str
    rule: str  # exact | tolerance | noise | budget | skipped
    passed: bool | None  # None: not judged (reported only, or skipped)
    message: str

    def to_json(self) -> dict:
        return {"name": self.name, "rule": self.rule, "passed": self.passed, "message": self.message}


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skipped", None, why)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bitwise_difference(expected: np.ndarray, actual: np.ndarray) -> str | None:
    """None when the arrays are equal bit for bit (NaN payloads and signed zeros included),
    else how they differ: how many elements, the first index and the largest difference."""
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return f"{actual.dtype}{list(actual.shape)} where {expected.dtype}{list(expected.shape)} was recorded"
    unsigned = _UNSIGNED[expected.dtype.itemsize]
    differs = np.ascontiguousarray(expected).view(unsigned) != np.ascontiguousarray(actual).view(unsigned)
    count = int(np.count_nonzero(differs))
    if count == 0:
        return None
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    wide_expected, wide_actual = expected.astype(np.float64), actual.astype(np.float64)
    with np.errstate(invalid="ignore"):
        gaps = np.abs(wide_expected[differs] - wide_actual[differs])
    largest = float(np.nanmax(gaps)) if np.any(~np.isnan(gaps)) else float("nan")
    return (f"{count} of {expected.size} elements differ, first at index {list(first)} "
            f"({float(wide_actual[first])!r} vs recorded {float(wide_expected[first])!r}), "
            f"largest difference {largest:.3g}")


def check_inputs(recorded: dict[str, np.ndarray], regenerated: dict[str, np.ndarray]) -> CheckResult:
    """The spec, replayed, must produce the very inputs that were recorded (same seeds, same files)."""
    problems = []
    for name, array in recorded.items():
        if name not in regenerated:
            problems.append(f"input `{name}` is no longer a tensor input of the pipeline")
            continue
        difference = bitwise_difference(array, regenerated[name])
        if difference:
            problems.append(f"input `{name}` regenerated from the spec differs from the recording: {difference}")
    if problems:
        return CheckResult("inputs", "exact", False, "\n".join(problems))
    return CheckResult("inputs", "exact", True, f"{', '.join(recorded) or 'no inputs'}: equal to the recording")


def check_results(entries: dict[str, ArrayEntry], recorded: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                  exact: bool, why_tolerance: str) -> CheckResult:
    """Bit for bit under the exact rule; within each result's recorded rtol/atol otherwise."""
    rule = "exact" if exact else "tolerance"
    problems, notes = [], []
    for name, entry in entries.items():
        if name not in outputs:
            problems.append(f"result `{name}` was not produced")
            continue
        if exact:
            difference = bitwise_difference(recorded[name], outputs[name])
            if difference:
                problems.append(f"result `{name}` differs from the recording: {difference}")
            continue
        comparison = compare(name, outputs[name], recorded[name], entry.dtype, entry.rtol, entry.atol)
        (notes if comparison.passed else problems).append(f"result {comparison.describe()}")
    head = "bit for bit" if exact else f"within the spec's tolerance (tolerance rule: {why_tolerance})"
    if problems:
        return CheckResult("results", rule, False, "\n".join([f"results not equal to the recording {head}:",
                                                              *problems]))
    return CheckResult("results", rule, True, "\n".join([f"{', '.join(entries)}: equal to the recording {head}",
                                                         *notes]))


def _layout(buffer: BufferRecord, with_offsets: bool) -> tuple:
    base = (buffer.role, buffer.dtype, tuple(buffer.shape), buffer.nbytes)
    return base + (buffer.offset,) if with_offsets else base


def check_snapshot(recorded: Snapshot | None, current: Snapshot | None, exact: bool, same_target: bool) -> CheckResult:
    """Buffer layout (and, under the exact rule, each buffer's digest) as recorded.

    Backends (and one backend's plans for different archs) lay out their intermediates
    differently, so across targets only the inputs' and results' buffers are compared, and
    without offsets.
    """
    rule = "exact" if exact else "tolerance"
    if recorded is None and current is None:
        return skipped("snapshot", "the backend keeps no arena, so there is no snapshot")
    if recorded is None or current is None:
        missing = "recorded" if recorded is None else "replayed"
        return CheckResult("snapshot", rule, False, f"the {missing} run has no memory snapshot")

    def buffers(s: Snapshot) -> dict[str, BufferRecord]:
        return {b.name: b for b in s.buffers if same_target or b.role in ("input", "result")}

    old, new = buffers(recorded), buffers(current)
    problems = [f"buffer `{n}` was recorded but is not in the replay's arena" for n in old if n not in new]
    problems += [f"buffer `{n}` is new in the replay's arena" for n in new if n not in old]
    for name in (n for n in old if n in new):
        was, now = _layout(old[name], same_target), _layout(new[name], same_target)
        if was != now:
            problems.append(f"buffer `{name}` changed layout: (role, dtype, shape, bytes{', offset' * same_target}) "
                            f"{was} -> {now}")
        elif exact and old[name].digest != new[name].digest:
            problems.append(f"buffer `{name}` holds different bytes (sha256 {new[name].digest[:12]}... "
                            f"vs recorded {old[name].digest[:12]}...)")
    if same_target and (recorded.alignment, recorded.guard_bytes) != (current.alignment, current.guard_bytes):
        problems.append(f"arena alignment/guard bytes {current.alignment}/{current.guard_bytes} vs recorded "
                        f"{recorded.alignment}/{recorded.guard_bytes}")
    if problems:
        return CheckResult("snapshot", rule, False, "\n".join(problems))
    scope = "every buffer" if same_target else "the inputs' and results' buffers (the backend or arch differs)"
    digests = "layout and digests equal" if exact else "layout equal; digests not compared under the tolerance rule"
    return CheckResult("snapshot", rule, True, f"{scope} ({len(old)}): {digests}")


def check_guards(snapshots: list[tuple[str, Snapshot | None]]) -> CheckResult:
    """Every guard band still holds its canary after each execution: nothing wrote out of bounds."""
    problems = []
    for when, snapshot in snapshots:
        if snapshot is None:
            continue
        damaged = snapshot.damaged_guards()
        if damaged:
            names = ", ".join(f"`{n}`" for n in damaged)
            problems.append(f"guard bands damaged around buffer {names} {when}: a kernel wrote outside the buffer")
    if problems:
        return CheckResult("guards", "exact", False, "\n".join(problems))
    if all(s is None for _, s in snapshots):
        return skipped("guards", "the backend keeps no arena, so there are no guard bands")
    return CheckResult("guards", "exact", True, "every guard band intact " + ", ".join(w for w, _ in snapshots))


def check_determinism(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> CheckResult:
    """Two executions of the same inputs must agree bit for bit, on every backend."""
    problems = []
    for name, array in first.items():
        difference = bitwise_difference(array, second[name])
        if difference:
            problems.append(f"result `{name}` differs between two executions of the same inputs: {difference}")
    if problems:
        return CheckResult("determinism", "exact", False, "\n".join(problems))
    return CheckResult("determinism", "exact", True, f"{', '.join(first)}: identical in two executions")


def check_code(recorded: dict[str, str], current: dict[str, str]) -> CheckResult:
    """The generated sources as recorded; a change shows as a unified diff per kernel."""
    problems = []
    for name in sorted(set(recorded) | set(current)):
        kernel = Path(name).stem
        if name not in current:
            problems.append(f"kernel `{kernel}` ({name}) is no longer generated")
        elif name not in recorded:
            problems.append(f"kernel `{kernel}` ({name}) is newly generated")
        elif recorded[name] != current[name]:
            diff = list(difflib.unified_diff(recorded[name].splitlines(keepends=True),
                                             current[name].splitlines(keepends=True),
                                             f"recorded/sources/{name}", f"replayed/sources/{name}"))
            shown = "".join(diff[:MAX_DIFF_LINES]).rstrip("\n")
            more = f"\n... {len(diff) - MAX_DIFF_LINES} more diff lines" if len(diff) > MAX_DIFF_LINES else ""
            problems.append(f"kernel `{kernel}` ({name}) changed:\n{shown}{more}")
    if problems:
        return CheckResult("code", "exact", False, "\n".join(problems))
    if not recorded:
        return CheckResult("code", "exact", True, "no generated sources (the executor reports none)")
    return CheckResult("code", "exact", True, f"{len(recorded)} generated source(s) unchanged")
