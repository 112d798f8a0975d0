"""``cuvil-dsl replay``: run a recorded case again and check it against the recording.

Order matters: the files are verified against their sha256 first (a tampered case is unusable,
exit status 2, and nothing else runs), then the spec copy is opened on the recorded backend (or
``--backend``), the rule is chosen (``exact`` only when backend, arch, toolchain and machine all
match the recording; ``tolerance`` otherwise, with the reason), and the pipeline runs twice
(results, snapshot, guards, determinism) before it is timed (budget, time). Generated code is
compared whenever backend and arch match, since codegen does not depend on compiler versions.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvil_dsl import driver
from cuvil_dsl.diagnostics import RunFailure
from cuvil_dsl.reference import HostHooks
from cuvil_dsl.runtime.base import Executor
from cuvil_dsl.testing import identity
from cuvil_dsl.testing.case import CHECKS, Case, CaseError, load_case
from cuvil_dsl.testing.checks import (
    CheckResult,
    check_code,
    check_determinism,
    check_guards,
    check_inputs,
    check_results,
    check_snapshot,
    skipped,
)
from cuvil_dsl.testing.record import Recording, record_case
from cuvil_dsl.testing.timing import TimingStats, Verdict, judge, measure


@dataclass
class ReplayReport:
    """Every check of one replay; ``unusable`` is set when the case itself could not be used."""

    case: str
    backend: str
    rule: str = "exact"
    rule_reason: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    recorded_timing: TimingStats | None = None
    timing: TimingStats | None = None
    verdict: Verdict | None = None
    budget: dict = field(default_factory=dict)
    unusable: str | None = None

    @property
    def passed(self) -> bool:
        return self.unusable is None and all(c.passed is not False for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 2 if self.unusable else (0 if self.passed else 1)

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> dict:
        timing = None
        if self.timing is not None:
            timing = {"median_us": self.timing.median_us, "spread": self.timing.spread,
                      "recorded_median_us": self.recorded_timing.median_us if self.recorded_timing else None,
                      "ratio": self.verdict.ratio if self.verdict else None,
                      "limit": self.verdict.limit if self.verdict else None}
        return {
            "case": self.case,
            "backend": self.backend,
            "rule": self.rule,
            "rule_reason": self.rule_reason,
            "checks": [c.to_json() for c in self.checks],
            "passed": self.passed,
            "timing": timing,
            "budget": self.budget,
            **({"unusable": self.unusable} if self.unusable else {}),
        }


def replay_case(folder: str | os.PathLike, *, backend: str | None = None, arch: str | None = None) -> ReplayReport:
    """Replay the case in ``folder``. Raises :class:`CaseError` for a case without a usable
    manifest and ``UserError`` when its spec cannot be opened here (a backend not available)."""
    case = load_case(folder)
    report = ReplayReport(str(Path(folder)), backend or case.backend, budget=case.budget,
                          recorded_timing=case.timing)
    problems = case.verify_files()
    if problems:
        report.checks.append(CheckResult("checksums", "exact", False, "\n".join(problems)))
        report.unusable = "the case's files changed after recording (" + ", ".join(
            p.split(":")[0] for p in problems) + ")"
        return report
    report.checks.append(CheckResult("checksums", "exact", True,
                                     f"{len(case.manifest['files'])} files match their recorded sha256"))
    recorded_inputs = case.arrays(case.input_entries)
    recorded_results = case.arrays(case.result_entries)
    session = driver.open_spec(case.spec_path, backend=report.backend, arch=arch)
    executor = driver.make_executor(session)
    try:
        _Replay(case, session, executor, report).run(recorded_inputs, recorded_results)
    finally:
        executor.close()
    return report


class _Replay:
    """One replay's state while its checks run in order."""

    def __init__(self, case: Case, session: driver.Session, executor: Executor, report: ReplayReport):
        self.case, self.session, self.executor, self.report = case, session, executor, report
        target = session.target
        self.current = {
            "target": {"backend": target.backend, "arch": target.arch},
            "toolchain": identity.toolchain(executor),
            "machine": identity.machine(target.backend, target.device),
        }
        changes = identity.differences(case.identity, self.current)
        report.rule, report.rule_reason = ("tolerance", "; ".join(changes)) if changes else ("exact", "")
        self.same_backend = target.backend == case.backend
        self.same_target = self.current["target"] == case.identity["target"]

    def add(self, result: CheckResult) -> None:
        if result.name in self.case.checks:
            self.report.checks.append(result)

    def run(self, recorded_inputs: dict[str, np.ndarray], recorded_results: dict[str, np.ndarray]) -> None:
        session, executor, exact = self.session, self.executor, self.report.rule == "exact"
        self.add(check_inputs(recorded_inputs, session.inputs))
        if self.same_target:
            self.add(check_code(self.case.sources(), executor.sources()))
        else:
            recorded, replayed = self._target(self.case.identity), self._target(self.current)
            self.add(skipped("code", f"generated code is compared on the recorded backend and arch only "
                                     f"({recorded}; this replay: {replayed})"))
        hooks = HostHooks(stream=io.StringIO())  # host `print`s would only clutter a replay
        try:
            first = executor.run(session.inputs, session.binding.params, hooks)
            first_snapshot = executor.snapshot()
            second = executor.run(session.inputs, session.binding.params, hooks)
            second_snapshot = executor.snapshot()
        except RunFailure as exc:
            self.add(CheckResult("results", self.report.rule, False, f"the execution failed: {exc}"))
            for name in ("snapshot", "guards", "determinism", "budget", "time"):
                self.add(skipped(name, "not run: the execution failed"))
            return
        self.add(check_results(self.case.result_entries, recorded_results, first, exact, self.report.rule_reason))
        self.add(check_snapshot(self.case.snapshot(), first_snapshot, exact, self.same_target))
        self.add(check_determinism(first, second))
        timed = {"budget", "time"} & set(self.case.checks)
        stats = self._measure() if timed else None
        after_timing = executor.snapshot() if timed else None
        self.add(check_guards([("after the checked execution", first_snapshot),
                               ("after the second execution", second_snapshot),
                               *([("after timing", after_timing)] if timed else [])]))
        if stats is not None:
            self.add(self._budget(stats))
            self.add(self._time(stats))
        self.report.checks.sort(key=lambda c: CHECKS.index(c.name))

    @staticmethod
    def _target(ident: dict) -> str:
        target = ident["target"]
        return f"backend {target['backend']}" + (f", arch {target['arch']}" if target.get("arch") else "")

    def _measure(self) -> TimingStats:
        """Noise-aware timing; a suspected regression is measured again and the faster run counts."""
        case = self.case
        stats = measure(self.executor, case.warmup, case.iterations)
        recorded, regress_pct = case.timing, self.session.spec.budget.regress_pct
        if recorded is not None and self._comparable() is None and judge(recorded, stats, regress_pct).passed is False:
            again = measure(self.executor, case.warmup, case.iterations)
            stats = min(stats, again, key=lambda s: s.median_us)
        self.report.timing = stats
        return stats

    def _comparable(self) -> str | None:
        """Why this replay's times cannot be compared with the recording's; None when they can."""
        if not self.same_backend:
            return f"recorded on backend {self.case.backend}, replayed on {self.session.target.backend}"
        old, new = self.case.identity.get("machine", {}), self.current["machine"]
        if old != new:
            changed = identity.differences({"machine": old}, {"machine": new})
            return "recorded on another machine (" + "; ".join(changed) + ")"
        return None

    def _time(self, stats: TimingStats) -> CheckResult:
        recorded = self.case.timing
        if recorded is None:
            return skipped("time", "no timing was recorded")
        regress_pct = self.session.spec.budget.regress_pct
        verdict = judge(recorded, stats, regress_pct)
        self.report.verdict = verdict
        message = verdict.describe(recorded, stats, regress_pct)
        why_not = self._comparable()
        if why_not:
            return CheckResult("time", "noise", None, f"{message}; not judged: {why_not}")
        if verdict.passed is False:
            message += " (confirmed by a second measurement)"
        return CheckResult("time", "noise", verdict.passed, message)

    def _budget(self, stats: TimingStats) -> CheckResult:
        items, passed, note = driver.judge_budget(self.session, stats.as_timing(), self.executor.kernel_reports())
        self.report.budget = {**self.session.spec.budget.model_dump(), "verdict": passed,
                              "items": {i.name: i.to_json() for i in items}}
        lines = [f"{i.name} {'-' if i.value is None else f'{i.value:.4g}'} (limit {i.limit:g})"
                 f"{'' if i.passed is None else (' ok' if i.passed else ' OVER')}" for i in items]
        return CheckResult("budget", "budget", passed, "; ".join(lines + ([note] if note else [])) or "no budget set")


def update_case(folder: str | os.PathLike, *, backend: str | None = None, arch: str | None = None) -> Recording:
    """Re-record a case in place from its own spec copy (for an intentional change).

    The case's provenance and its list of checks are kept. A case whose files no longer match
    their sha256 is refused: re-recording it would bless whatever changed them.
    """
    case = load_case(folder)
    problems = case.verify_files()
    if problems:
        raise CaseError(f"{folder}: refusing to re-record a case whose files changed after recording "
                        f"({'; '.join(problems)}); record it again from its source spec")
    provenance = {k: v for k, v in case.manifest["spec"].items() if k not in ("file", "pipeline_file")}
    return record_case(case.spec_path, case.path, backend=backend or case.backend, iterations=case.iterations,
                       arch=arch, force=True, provenance=provenance, checks=case.checks)


def format_replay(report: ReplayReport) -> str:
    """The text ``cuvil-dsl replay`` prints: one line per check, details indented below."""
    marks = {True: "PASS", False: "FAIL", None: "-"}
    rule = report.rule + (f" ({report.rule_reason})" if report.rule_reason else "")
    lines = [f"case {report.case}  backend={report.backend}  rule={rule}"]
    width = max((len(c.name) for c in report.checks), default=0)
    for c in report.checks:
        first, *rest = c.message.splitlines() or [""]
        lines.append(f"  {marks[c.passed]:4}  {c.name:{width}}  [{c.rule}] {first}")
        lines += [f"          {line}" for line in rest]
    if report.unusable:
        lines.append(f"unusable case: {report.unusable}")
    else:
        lines.append("replay passed" if report.passed else
                     "replay FAILED: " + ", ".join(c.name for c in report.checks if c.passed is False))
    return "\n".join(lines)
