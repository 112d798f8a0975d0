"""``cuvil-dsl record``: run a spec as ``run`` does and keep everything a replay needs.

The spec and its files are copied into the case first and the run is made from the copy, so what
is recorded is exactly what a replay will run. The case is built in ``DIR.tmp-<pid>`` beside
``DIR`` and renamed into place only when complete: an interrupted recording leaves no case
behind, never half of one. A run that fails (its numeric check, an ``assert_finite``) records
nothing: a regression baseline must be a correct run.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from cuvil_dsl import driver
from cuvil_dsl.driver import RunReport, Session
from cuvil_dsl.ir.printer import format_pipeline
from cuvil_dsl.passes.plan import FusionPlan, format_plan
from cuvil_dsl.runtime.base import Executor
from cuvil_dsl.spec import LoadedSpec, bind, load_spec
from cuvil_dsl.spec.yaml_tree import parse_yaml
from cuvil_dsl.testing import identity
from cuvil_dsl.testing.case import (
    CHECKS,
    FORMAT_VERSION,
    ArrayEntry,
    CaseError,
    save_array,
    write_manifest,
)
from cuvil_dsl.testing.timing import TimingStats, measure


class RecordRefused(Exception):
    """The run failed, so nothing was recorded (exit status 1); ``report`` says how it failed."""

    def __init__(self, message: str, report: RunReport):
        super().__init__(message)
        self.report = report


@dataclass
class Recording:
    """A case just written, with the run it came from."""

    path: Path
    report: RunReport
    timing: TimingStats
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"case": str(self.path), "run": self.report.to_json(), "timing": self.timing.to_json(),
                "warnings": self.warnings}

    def describe(self, verb: str = "recorded") -> str:
        """One line for the terminal: what was recorded, and its time with the measured noise."""
        report = self.report
        return (f"{verb} {self.path}: pipeline {report.pipeline} on {report.backend}, "
                f"{len(report.outputs)} result(s), {len(report.kernels)} kernel(s); median "
                f"{self.timing.median_us:.1f} us over {self.timing.samples} executions "
                f"(noise {self.timing.spread * 100:.1f}%)")


def parse_shape(text: str) -> tuple[str, int]:
    """``--shape R=256``: a symbol's size for the recorded copy of the spec; ValueError if malformed."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier() or not value.isdigit() or int(value) <= 0:
        raise ValueError(f"expected SYMBOL=SIZE with a positive size, got {text!r}")
    return name, int(value)


def record_case(spec: str | os.PathLike, out: str | os.PathLike, *, backend: str | None = None,
                iterations: int | None = None, arch: str | None = None, force: bool = False,
                shapes: dict[str, int] | None = None, provenance: dict | None = None,
                checks: tuple[str, ...] = CHECKS) -> Recording:
    """Run ``spec`` and write a case to ``out``.

    ``shapes`` overrides sizes in the recorded copy of the spec (a smaller instance of a large
    example). ``provenance`` (where the spec came from, the overrides) and ``checks`` (the checks
    a replay applies) are kept from an earlier recording when a case is re-recorded in place.
    Raises ``UserError`` for a bad spec, :class:`CaseError` when ``out`` holds a case and
    ``force`` is false, :class:`RecordRefused` when the run fails.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise CaseError(f"{out} already exists; pass --force to replace it")
    loaded = load_spec(spec)
    bind(loaded, driver.load_pipeline(loaded)[0])  # spec problems reported at the user's file, not the copy
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        provenance = provenance or {"recorded_from": str(spec), "shapes_override": dict(shapes or {})}
        spec_copy = copy_spec(loaded, tmp / "spec", shapes or {}, provenance["recorded_from"])
        header = {"spec": provenance, "checks": list(checks)}
        recording = _record_into(tmp, spec_copy, backend, iterations, arch, header)
        _install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    recording.path = out
    return recording


_COPY_NOTE = "# Recorded copy of "


def copy_spec(loaded: LoadedSpec, folder: Path, shapes: dict[str, int], origin: str) -> Path:
    """Copy the spec, its pipeline source and its ``.npy`` inputs into ``folder``, the spec's
    paths rewritten to the copies (input files become ``files/NAME.npy``, so names cannot clash).
    The spec's leading comment is kept, with a line naming ``origin`` (the spec it came from);
    its other comments are lost in the rewrite."""
    folder.mkdir(parents=True)
    text = Path(loaded.file).read_text(encoding="utf-8-sig")
    data = parse_yaml(text, loaded.file).data
    data["pipeline"] = loaded.pipeline_path.name
    shutil.copyfile(loaded.pipeline_path, folder / loaded.pipeline_path.name)
    for name, source in loaded.input_paths.items():
        relative = f"files/{name}.npy"
        (folder / "files").mkdir(exist_ok=True)
        shutil.copyfile(source, folder / relative)
        data["inputs"][name] = {"file": relative}
    if shapes:
        data["shapes"] = {**data.get("shapes", {}), **shapes}
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith(_COPY_NOTE):  # a case re-recorded from its own copy keeps one note
            header.append(line)
    header.append(f"{_COPY_NOTE}{origin}: paths point at the copies in this folder.")
    target = folder / Path(loaded.file).name
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    target.write_text("\n".join(header) + "\n" + body, encoding="utf-8")
    return target


def _record_into(folder: Path, spec_copy: Path, backend: str | None, iterations: int | None, arch: str | None,
                 header: dict) -> Recording:
    session = driver.open_spec(spec_copy, backend=backend, arch=arch)
    executor = driver.make_executor(session)
    try:
        report = driver.execute(session, iterations=iterations, executor=executor)
        _refuse_failed(report)
        run = session.spec.run
        iterations = iterations or run.iterations
        timing = measure(executor, run.warmup, iterations, first=report.timing)
        manifest = _manifest(session, report, executor, timing, iterations, folder, spec_copy, header)
    finally:
        executor.close()
    warnings = []
    if report.budget_passed is False:
        warnings.append(f"recorded over budget ({_over_budget(report)}): replays fail their budget check until "
                        "the pipeline is faster or the budget changes")
    write_manifest(folder, manifest)
    return Recording(folder, report, timing, warnings)


def _refuse_failed(report: RunReport) -> None:
    if report.failure:
        raise RecordRefused(f"the run failed: {report.failure}", report)
    if report.check_passed is False:
        bad = "; ".join(c.describe() for c in report.comparisons if not c.passed)
        raise RecordRefused(f"the results fail their check against the reference: {bad}", report)


def _over_budget(report: RunReport) -> str:
    return ", ".join(f"{b.name} {b.value:g} > {b.limit:g}" for b in report.budget_items if b.passed is False)


def _manifest(session: Session, report: RunReport, executor: Executor, timing: TimingStats, iterations: int,
              folder: Path, spec_copy: Path, header: dict) -> dict:
    """Write the arrays, snapshot, IR, plan and sources into ``folder``; return the manifest.

    ``header`` holds the spec's provenance and the checks to apply."""
    spec = session.spec
    inputs, results = {}, {}
    for param in session.pipeline.tensor_params:
        entry = ArrayEntry(param.name, f"inputs/{param.name}.npy", param.type.dtype,
                           tuple(session.binding.shapes[param.name]))
        save_array(folder / entry.file, session.inputs[param.name], entry.dtype)
        inputs[param.name] = entry.to_json(with_tolerance=False)
    for res in session.pipeline.results:
        rtol, atol = spec.check.tolerances(res.type.dtype, session.target.tf32)
        array = report.outputs[res.name]
        entry = ArrayEntry(res.name, f"results/{res.name}.npy", res.type.dtype, tuple(array.shape), rtol, atol)
        save_array(folder / entry.file, array, entry.dtype)
        results[res.name] = entry.to_json(with_tolerance=True)
    manifest: dict = {
        "format": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "spec": {"file": spec_copy.relative_to(folder).as_posix(),
                 "pipeline_file": (spec_copy.parent / session.loaded.pipeline_path.name).relative_to(folder).as_posix(),
                 **header["spec"]},
        "pipeline": session.pipeline.name,
        "backend": session.target.backend,
        "checks": header["checks"],
        "run": {"warmup": spec.run.warmup, "iterations": iterations},
        "sizes": dict(session.binding.sizes),
        "params": {k: _plain(v) for k, v in session.binding.params.items()},
        "inputs": inputs,
        "results": results,
        "reference_check": {"passed": report.check_passed, "note": report.check_note,
                            "results": {c.name: c.to_json() for c in report.comparisons}},
        "identity": {
            "target": {"backend": session.target.backend, "arch": session.target.arch},
            "toolchain": identity.toolchain(executor),
            "machine": identity.machine(session.target.backend, session.target.device),
        },
        "kernels": [k.to_json() for k in report.kernels],
        "timing": timing.to_json(),
        "budget": {**spec.budget.model_dump(), "verdict": report.budget_passed},
    }
    if report.snapshot is not None:
        (folder / "snapshot.json").write_text(_json(report.snapshot.to_json()), encoding="utf-8")
        manifest["snapshot"] = "snapshot.json"
    (folder / "pipeline.ir").write_text(format_pipeline(session.pipeline), encoding="utf-8")
    plan = getattr(executor, "plan", None)
    if isinstance(plan, FusionPlan):
        (folder / "plan.txt").write_text(format_plan(plan), encoding="utf-8")
    sources = executor.sources()
    for name, text in sources.items():
        if Path(name).name != name or name in (".", ".."):
            raise CaseError(f"the executor named a source {name!r}, which is not a plain file name")
        (folder / "sources").mkdir(exist_ok=True)
        (folder / "sources" / name).write_text(text, encoding="utf-8")
    manifest["sources"] = sorted(sources)
    return manifest


def _plain(value):
    """A scalar parameter's value as YAML can write it (NumPy scalars become Python numbers)."""
    return value.item() if hasattr(value, "item") else value


def _json(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def _install(tmp: Path, out: Path) -> None:
    """Move the finished case into place; an older case there is swapped out, then removed."""
    if out.exists():
        old = out.parent / f"{out.name}.old-{os.getpid()}"
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)

