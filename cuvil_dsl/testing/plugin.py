"""The pytest plugin: every recorded case under a ``regression/`` folder runs as test items.

Installed with cuvil-dsl (entry point ``pytest11``), so ``pytest regression`` needs no conftest.
Each ``regression/**/case.yaml`` gives one item per check the case lists, with ids such as
``regression/cpu/softmax::results``; the case is replayed once, on its first item, and each item
reports its own check. A failed check fails its item with the check's message (no traceback); a
check that does not apply is skipped with the reason; a time that is reported but not judged
passes. Cases recorded on ``cuda`` skip cleanly where there is no GPU.

With pytest-benchmark installed and enabled, ``::time`` is also a benchmark: ``benchmark.pedantic`` runs one
pipeline execution per round under a timer that synchronises the device, and the device's own
times (CUDA events on the GPU) go to ``benchmark.extra_info``. The judged regression verdict is
still the replay's noise-aware one; pytest-benchmark adds its storage and ``--benchmark-compare``.

Options: ``--cuvil-backend`` replays every case on another backend (the tolerance rule applies),
``--cuvil-update`` re-records every collected case in place first, ``--cuvil-report FILE``
writes the HTML report (and the JSON one beside it, ``FILE`` with ``.json``).

This module imports only pytest at load: it is loaded by every pytest run in the environment.
"""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path

import pytest

_REPORTS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cuvil", "cuvil-dsl regression cases")
    group.addoption("--cuvil-backend", choices=("cuda", "cpu", "reference"), default=None,
                    help="replay every case on this backend instead of the recorded one")
    group.addoption("--cuvil-update", action="store_true", default=False,
                    help="re-record every collected case in place before replaying it (intentional changes)")
    group.addoption("--cuvil-report", metavar="FILE", default=None,
                    help="write an HTML report of the replays to FILE, and JSON to FILE with .json")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REPORTS] = []


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name != "case.yaml" or not _in_regression_folder(file_path, parent.config.rootpath):
        return None
    case_dir = file_path.parent
    try:
        nodeid = case_dir.relative_to(parent.config.rootpath).as_posix()
    except ValueError:
        nodeid = case_dir.as_posix()
    return CaseFile.from_parent(parent, path=file_path, nodeid=nodeid)


def _in_regression_folder(path: Path, root: Path) -> bool:
    """Only cases under a folder named ``regression`` (the rootdir or below it, when the case is
    inside the rootdir), never the ``.tmp-``/``.old-`` folders a recording in progress leaves."""
    try:
        folders = (root.name, *path.relative_to(root).parts[:-1])
    except ValueError:
        folders = path.parts[:-1]
    return "regression" in folders and not any(".tmp-" in p or ".old-" in p for p in folders)


class CheckFailed(Exception):
    """A check of a replay failed; its message is the whole failure report."""


class CaseFile(pytest.File):
    """One case folder: replayed once (lazily), its checks reported by the items below it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._report = None
        self._skip: str | None = None

    @property
    def case_dir(self) -> Path:
        return self.path.parent

    def collect(self):
        from cuvil_dsl.testing.case import CaseError, load_case

        try:
            case = load_case(self.case_dir)
            checks, backend = case.checks, self.config.getoption("cuvil_backend") or case.backend
        except CaseError:
            checks, backend = ("checksums",), None  # its item reports why the case is unusable
        benchmarking = _benchmarks_active(self.config)
        for name in checks:
            if name == "time" and benchmarking:
                item = _time_function(self, backend)
            else:
                item = CheckItem.from_parent(self, name=name)
            if backend == "cuda":  # `pytest -m gpu` selects the cases that replay on the GPU
                item.add_marker(pytest.mark.gpu)
            yield item

    def replay(self):
        """The case's replay report, made on first use; raises ``Skipped`` where it cannot run here."""
        if self._skip:
            pytest.skip(self._skip)
        if self._report is None:
            try:
                self._report = self._replay()
            except pytest.skip.Exception as exc:
                self._skip = str(exc.msg)
                raise
            self.config.stash[_REPORTS].append(self._report)
        return self._report

    def _replay(self):
        from cuvil_dsl.diagnostics import UserError, render
        from cuvil_dsl.runtime.device import gpu_available
        from cuvil_dsl.testing.case import CaseError, load_case
        from cuvil_dsl.testing.record import RecordRefused
        from cuvil_dsl.testing.replay import ReplayReport, replay_case, update_case

        name = self.nodeid
        backend = self.config.getoption("cuvil_backend")
        try:
            case = load_case(self.case_dir)
            if (backend or case.backend) == "cuda" and not gpu_available():
                pytest.skip("replays on cuda, and this machine has no CUDA GPU")
            if self.config.getoption("cuvil_update"):
                update_case(self.case_dir, backend=backend)
            report = replay_case(self.case_dir, backend=backend)
        except (CaseError, RecordRefused) as exc:
            return ReplayReport(name, backend or "unknown", unusable=str(exc))
        except UserError as exc:
            problems = "\n".join(render(d) for d in exc.diagnostics)
            return ReplayReport(name, backend or case.backend, unusable=f"the case's spec cannot run here:\n{problems}")
        report.case = name
        return report

    def benchmark(self, fixture, backend: str) -> None:
        """pytest-benchmark rounds of one execution each; the device's times go to ``extra_info``."""
        report = self.replay()
        if report.unusable:
            return
        from cuvil_dsl import driver
        from cuvil_dsl.reference import HostHooks
        from cuvil_dsl.testing.case import load_case

        case = load_case(self.case_dir)
        session = driver.open_spec(case.spec_path, backend=backend)
        executor = driver.make_executor(session)
        device_us: list[float] = []
        try:
            executor.run(session.inputs, session.binding.params, HostHooks(stream=io.StringIO()))
            fixture.pedantic(lambda: device_us.append(executor.time(0, 1).samples_us[0]),
                             rounds=case.iterations, warmup_rounds=case.warmup, iterations=1)
        finally:
            executor.close()
        timed = device_us[-case.iterations:]
        fixture.extra_info.update({
            "case": self.nodeid,
            "backend": backend,
            "device_time": "CUDA events" if backend == "cuda" else "host clock",
            "device_median_us": statistics.median(timed),
            "device_samples_us": timed,
            "replay_median_us": report.timing.median_us if report.timing else None,
            "recorded_median_us": report.recorded_timing.median_us if report.recorded_timing else None,
        })


def _benchmarks_active(config: pytest.Config) -> bool:
    """Whether pytest-benchmark is loaded and will time: not ``--benchmark-disable`` or
    ``--benchmark-skip``, and not switched off by itself (under xdist)."""
    session = getattr(config, "_benchmarksession", None)
    return session is not None and not session.disabled and not session.skip


def _assert_check(case: CaseFile, name: str) -> str:
    """Fail, skip or pass as the case's check ``name`` says; returns the message of a pass."""
    report = case.replay()
    check = report.check(name)
    if check is None:
        checksums = report.check("checksums")
        if checksums is not None and checksums.passed is False:
            pytest.skip(f"not run: the case's files changed after recording (see {case.nodeid}::checksums)")
        if report.unusable:
            raise CheckFailed(f"{case.nodeid}: unusable case: {report.unusable}")
        pytest.skip(f"not run: {name} is not among the checks of this replay")
    if check.passed is False:
        raise CheckFailed(f"{case.nodeid}::{name} [{check.rule}]\n{check.message}")
    if check.rule == "skipped":
        pytest.skip(check.message)
    return check.message


class CheckItem(pytest.Item):
    """One check of one case, e.g. ``regression/cpu/softmax::results``."""

    def runtest(self) -> None:
        message = _assert_check(self.parent, self.name)
        self.add_report_section("call", "cuvil", message)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"{self.parent.nodeid}::{self.name}"  # a line, so skip marks can report


class TimeFunction(pytest.Function):
    """``::time`` of a case, as a function taking fixtures; reported under the case's name."""

    def reportinfo(self):
        return self.path, 0, f"{self.parent.nodeid}::{self.name}"  # a line, so skip marks can report


def _time_function(case: CaseFile, backend: str | None) -> pytest.Function:
    """``::time`` as a test function, so it can take pytest-benchmark's ``benchmark`` fixture."""

    def time_check(benchmark) -> None:
        try:
            case.benchmark(benchmark, backend or "reference")
            message = _assert_check(case, "time")
        except CheckFailed as exc:
            pytest.fail(str(exc), pytrace=False)
        item.add_report_section("call", "cuvil", message)

    item = TimeFunction.from_parent(case, name="time", callobj=time_check)
    timer = _synchronized_timer if backend == "cuda" else time.perf_counter
    item.add_marker(pytest.mark.benchmark(group=case.nodeid, timer=timer))
    return item


def _synchronized_timer() -> float:
    """The host clock after the device has finished its queued work (a GPU-correct timer)."""
    import cupy

    cupy.cuda.Device().synchronize()
    return time.perf_counter()


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """pytest-benchmark's machine id knows no GPU: add its name, arch and driver when there is one."""
    from cuvil_dsl.runtime.device import device_info, gpu_available

    if not gpu_available():
        return
    from cupy.cuda import runtime

    info = device_info(0)
    machine_info["cuda"] = {"gpu": info.name, "arch": info.arch, "driver": runtime.driverGetVersion(),
                            "runtime": runtime.runtimeGetVersion()}


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("cuvil_report")
    reports = session.config.stash.get(_REPORTS, [])
    if not path or not reports:
        return
    from cuvil_dsl.testing.html import write_html, write_json

    write_html(reports, path)
    write_json(reports, Path(path).with_suffix(".json"))
