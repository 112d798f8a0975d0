"""One benchmark, from an opened spec to a :class:`BenchResult`.

Order of work for each spec: the float64 reference (once, shared by every check); our executor,
its checked run and the comparison of its results; then each baseline in turn: built on the same
input values, run once, its output checked against the same reference with the spec's tolerances.
Host contenders (NumPy, the cpu backend) are timed as soon as they are checked. The GPU contenders
that passed (ours, also when wrong: flagged) are then timed together in ``Settings.rounds``
interleaved rounds (each contender once a round, the order rotated by one each round; see
:mod:`cuvil_dsl.bench.timing`), so
that drift of the device between contenders shows as a spread across rounds instead of as a
difference between them. Last the floor from the plan. A baseline that fails to build, run or time
is reported with its error, one that computes something else as ``wrong``: neither stops the
benchmark. Our own failures decide the exit status (1 when our results are wrong).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from cuvil_dsl.bench.baselines import FAMILIES, Family, NotApplicable, check_output, problem_for
from cuvil_dsl.bench.contender import Contender
from cuvil_dsl.bench.roofline import Ceilings, Floor, floor_for, masked_share
from cuvil_dsl.bench.timing import GpuTimer, HostTimer, Measurement, Settings, merge
from cuvil_dsl.check import Comparison, compare, tolerances
from cuvil_dsl.diagnostics import RunFailure
from cuvil_dsl.driver import Session, kernel_overrides, make_executor
from cuvil_dsl.reference import HostHooks
from cuvil_dsl.reference import execute as reference_execute

OK, WRONG, ERROR, UNAVAILABLE, FAILED = "ok", "wrong", "error", "unavailable", "failed"


@dataclass
class Entry:
    """One contender's outcome in one benchmark."""

    name: str
    label: str
    device: str
    status: str  # ok | wrong (checked, not timed) | error | unavailable | failed (ours: did not run)
    measurement: Measurement | None = None
    check: Comparison | None = None
    reason: str = ""
    note: str = ""

    @property
    def median_us(self) -> float | None:
        return self.measurement.median_us if self.measurement is not None else None

    def to_json(self) -> dict:
        out: dict = {"label": self.label, "device": self.device, "status": self.status}
        if self.measurement is not None:
            out.update(self.measurement.to_json())
        if self.check is not None:
            out["check"] = {"passed": self.check.passed, **self.check.to_json()}
        if self.reason:
            out["reason"] = self.reason
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class BenchResult:
    name: str  # the spec file's stem
    spec: str
    pipeline: str
    backend: str
    kind: str | None = None  # what the baselines were matched as
    baseline_note: str = ""  # why there are none, when there are none
    check_passed: bool | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)  # ours first
    floor: Floor | None = None
    failure: str | None = None  # ours failed while executing

    @property
    def exit_code(self) -> int:
        return 1 if (self.failure or self.check_passed is False) else 0

    def entry(self, name: str) -> Entry | None:
        return next((e for e in self.entries if e.name == name), None)


@dataclass
class _Pending:
    """A checked GPU contender waiting for its timing rounds; its entry is complete once they are."""

    entry: Entry
    contender: Contender
    parts: list[Measurement] = field(default_factory=list)


class Bench:
    """Runs benchmarks on one backend with one set of baselines, timers and ceilings."""

    def __init__(self, backend: str, settings: Settings | None = None, families: list[Family] | None = None,
                 clock_factory: Callable[[], object] | None = None, host_timer: HostTimer | None = None,
                 log: Callable[[str], None] = lambda text: None):
        """``clock_factory`` makes the GPU clock on first need (default: a CudaClock on device 0)."""
        self.backend = backend
        self.settings = settings or Settings()
        self.families = list(FAMILIES if families is None else families)
        self.host_timer = host_timer or HostTimer(self.settings)
        self._clock_factory = clock_factory
        self._gpu_timer: GpuTimer | None = None
        self._round_timer: GpuTimer | None = None
        self.ceilings: Ceilings | None = None
        self.log = log

    @property
    def gpu_timer(self) -> GpuTimer:
        if self._gpu_timer is None:
            if self._clock_factory is None:
                from cuvil_dsl.bench.timing import CudaClock

                clock = CudaClock()
            else:
                clock = self._clock_factory()
            self._gpu_timer = GpuTimer(clock, self.settings)
        return self._gpu_timer

    @property
    def round_timer(self) -> GpuTimer:
        """The GPU timer of one interleaved round (the same clock, a round's share of the settings)."""
        if self._round_timer is None:
            self._round_timer = GpuTimer(self.gpu_timer.clock, self.settings.per_round())
        return self._round_timer

    def measure_ceilings(self, quick: bool = False) -> Ceilings:
        """The roofline's ceilings on our backend's device, measured now."""
        from cuvil_dsl.bench import roofline

        if self.backend == "cuda":
            self.ceilings = roofline.measure_gpu(self.gpu_timer)
        else:
            sizes = {"copy_bytes": 1 << 25, "n": 512} if quick else {}
            self.ceilings = roofline.measure_host(self.host_timer, **sizes)
        return self.ceilings

    def measure(self, contender: Contender) -> Measurement:
        if contender.device == "gpu":
            return self.gpu_timer.measure(contender.launch, contender.stream, contender.call)
        return self.host_timer.measure(contender.launch)

    # -- one benchmark --------------------------------------------------------------------------

    def run(self, session: Session) -> BenchResult:
        """Benchmark one opened spec; UserError (a compile failure) propagates: exit status 2."""
        name = Path(session.loaded.file).stem
        result = BenchResult(name, session.loaded.file, session.pipeline.name, session.target.backend)
        expected = self._reference(session)
        executor = make_executor(session)
        pending: list[_Pending] = []
        try:
            self._ours(session, executor, expected, result, pending)
            self._baselines(session, expected, result, pending)
            self._time_in_rounds(session, result, pending)
        finally:
            for waiting in pending:
                waiting.contender.close()
            executor.close()
            gc.collect()
        result.floor = self._floor(session)
        return result

    def _time_in_rounds(self, session: Session, result: BenchResult, pending: list[_Pending]) -> None:
        """Every pending GPU contender timed in ``settings.rounds`` interleaved rounds. A contender that
        fails in a round leaves the later ones: ours as FAILED (the benchmark fails), a baseline as ERROR."""
        rounds = max(1, self.settings.rounds)
        for r in range(rounds):
            # each round starts one contender later, so none always runs first (after a pause) or
            # always after the same neighbour
            shift = r % len(pending) if pending else 0
            for waiting in pending[shift:] + pending[:shift]:
                entry = waiting.entry
                if entry.status not in (OK, WRONG):
                    continue
                self.log(f"{session.pipeline.name}: timing {entry.label}"
                         + (f" (round {r + 1} of {rounds})" if rounds > 1 else ""))
                timer = self.round_timer if rounds > 1 else self.gpu_timer
                contender = waiting.contender
                try:
                    waiting.parts.append(timer.measure(contender.launch, contender.stream, contender.call))
                except RunFailure as exc:  # ours: a fault that only a later execution met
                    result.failure = str(exc)
                    entry.status, entry.reason, entry.check = FAILED, str(exc), None
                except Exception as exc:
                    if entry.name == "ours":
                        raise
                    entry.status, entry.reason = ERROR, _short(exc)
        for waiting in pending:
            if waiting.entry.status in (OK, WRONG) and waiting.parts:
                waiting.entry.measurement = merge(waiting.parts)

    def _reference(self, session: Session) -> dict[str, np.ndarray] | None:
        if session.spec.check.reference == "none":
            return None
        self.log(f"{session.pipeline.name}: float64 reference")
        return reference_execute(session.pipeline, session.inputs, session.binding.params)

    def _tolerances(self, session: Session, dtype) -> tuple[float, float]:
        check = session.spec.check
        return tolerances(dtype, check.rtol, check.atol, session.target.tf32)

    def _ours(self, session: Session, executor, expected, result: BenchResult, pending: list[_Pending]) -> None:
        from cuvil_dsl.bench.ours import ours

        label = "cuvil-dsl" if executor.backend == "cuda" else f"cuvil-dsl ({executor.backend})"
        device = "gpu" if executor.backend == "cuda" else "host"
        try:
            outputs = executor.run(session.inputs, session.binding.params, HostHooks())
        except RunFailure as exc:
            result.failure = str(exc)
            result.entries.append(Entry("ours", label, device, FAILED, reason=str(exc)))
            return
        if expected is not None and executor.backend != "reference":
            for res in session.pipeline.results:
                rtol, atol = self._tolerances(session, res.type.dtype)
                result.comparisons.append(compare(res.name, outputs[res.name], expected[res.name], res.type.dtype,
                                                  rtol, atol))
            result.check_passed = all(c.passed for c in result.comparisons)
        contender = ours(session, executor)
        status = OK if result.check_passed is not False else WRONG
        failed = [c for c in result.comparisons if not c.passed]
        check = (failed or result.comparisons or [None])[0]  # the first failure, else the first result
        entry = Entry("ours", contender.label, contender.device, status, None, check, note=contender.note)
        result.entries.append(entry)
        if contender.device == "gpu":
            pending.append(_Pending(entry, contender))
            return
        try:
            self.log(f"{session.pipeline.name}: timing {contender.label}")
            entry.measurement = self.measure(contender)
        except RunFailure as exc:  # a fault that only a later execution met
            result.failure = str(exc)
            entry.status, entry.reason, entry.check = FAILED, str(exc), None
        finally:
            contender.close()

    def _baselines(self, session: Session, expected, result: BenchResult, pending: list[_Pending]) -> None:
        if not self.families:
            return
        problem, why = problem_for(session)
        if problem is None:
            result.baseline_note = why
            return
        result.kind = problem.kind
        for family in self.families:
            result.entries.append(self._baseline(family, problem, expected, session, pending))

    def _baseline(self, family: Family, problem, expected, session: Session, pending: list[_Pending]) -> Entry:
        """The baseline built, run once and checked; a host one also timed, a GPU one that passed left
        in ``pending`` (open) for the rounds."""
        missing = family.missing()
        if missing:
            return Entry(family.name, family.label, family.device, UNAVAILABLE, reason=missing)
        self.log(f"{session.pipeline.name}: {family.label}")
        try:
            contender = family.build(problem)
        except NotApplicable as exc:
            return Entry(family.name, family.label, family.device, UNAVAILABLE, reason=str(exc))
        except Exception as exc:  # a baseline's own failure is reported, never fatal
            return Entry(family.name, family.label, family.device, ERROR, reason=_short(exc))
        kept = False
        try:
            try:
                output = contender.fetch(contender.launch())  # compiles, autotunes, loads: untimed
            except Exception as exc:
                return Entry(family.name, contender.label, contender.device, ERROR, reason=_short(exc))
            check = None
            if expected is not None:
                rtol, atol = self._tolerances(session, problem.result_dtype)
                check = check_output(problem.result, output, expected[problem.result], problem.result_dtype, rtol, atol)
                if not check.passed:
                    return Entry(family.name, contender.label, contender.device, WRONG, check=check,
                                 reason=f"computes something else: {check.describe()}")
            del output
            entry = Entry(family.name, contender.label, contender.device, OK, None, check, note=contender.note)
            if contender.device == "gpu":
                pending.append(_Pending(entry, contender))
                kept = True
                return entry
            try:
                entry.measurement = self.measure(contender)
            except Exception as exc:
                entry.status, entry.reason = ERROR, _short(exc)
            return entry
        finally:
            if not kept:
                contender.close()
                gc.collect()

    def _floor(self, session: Session) -> Floor:
        from cuvil_dsl.passes import plan_pipeline

        plan, _ = plan_pipeline(session.pipeline, kernel_overrides(session.loaded), session.target.arch)
        kept = masked_share(session.pipeline, session.inputs, session.binding.params, session.binding.sizes)
        return floor_for(plan, session.pipeline, session.binding.sizes, self.ceilings, kept)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
