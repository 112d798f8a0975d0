"""From a spec file to a checked, timed, judged run: what `cuvil-dsl run` does.

``open_spec`` does everything that can fail before executing (exit status 2): the spec, the
pipeline source, the binding, the backend. ``execute`` runs it once with host statements,
checks the results against the float64 reference, times it and judges the budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvil_dsl.check import Comparison, compare
from cuvil_dsl.diagnostics import Diagnostic, Span, UserError, error, raise_if_errors
from cuvil_dsl.ir.nodes import Pipeline
from cuvil_dsl.reference import HostHooks
from cuvil_dsl.reference import execute as reference_execute
from cuvil_dsl.runtime.base import Executor, KernelReport, Snapshot, Target, Timing
from cuvil_dsl.spec import Binding, LoadedSpec, bind, load_spec, make_inputs, select_pipeline
from cuvil_dsl.spec.binding import check_reference_memory
from cuvil_dsl.types import DType

BACKENDS = ("auto", "cuda", "cpu", "reference")


@dataclass
class Session:
    """A spec resolved for running: everything found before executing."""

    loaded: LoadedSpec
    pipeline: Pipeline
    binding: Binding
    target: Target
    warnings: tuple[Diagnostic, ...]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def spec(self):
        return self.loaded.spec


def gpu_available() -> bool:
    from cuvil_dsl.runtime.device import gpu_available as probe

    return probe()


def resolve_backend(requested: str, loaded: LoadedSpec | None = None, from_cli: bool = False) -> str:
    """``auto`` becomes cuda with a GPU, else cpu; cuda without a GPU is E601 (exit status 2)."""
    if requested == "auto":
        return "cuda" if gpu_available() else "cpu"
    if requested == "cuda" and not gpu_available():
        if loaded is None:
            span = Span.whole_file("<command line>")
        elif from_cli:
            span = loaded.file_start()
        else:
            span = loaded.span_of("target", "backend", key=False)
        raise UserError([error(
            "E601", "backend `cuda` needs an NVIDIA GPU and driver, and none is available here", span,
            "run with --backend cpu (numba) or --backend reference (NumPy float64); "
            "`cuvil-dsl doctor` shows what was found")])
    return requested


def resolve_arch(loaded: LoadedSpec, backend: str, cli_arch: str | None, device: int = 0) -> str | None:
    arch = cli_arch or loaded.spec.target.arch
    if arch != "auto":
        return arch
    if backend == "cuda" or gpu_available():
        from cuvil_dsl.runtime.device import device_arch

        return device_arch(device)
    return None


def load_pipeline(loaded: LoadedSpec) -> tuple[Pipeline, tuple[Diagnostic, ...]]:
    from cuvil_dsl.api import checked_module  # from the IR cache when nothing changed

    module, diagnostics = checked_module(Path(loaded.pipeline_path))
    return select_pipeline(loaded, module), diagnostics


def open_spec(path: str | Path, backend: str | None = None, arch: str | None = None) -> Session:
    """Load, check and bind a spec; raises UserError for anything wrong (exit status 2)."""
    loaded = load_spec(path)
    pipeline, warnings = load_pipeline(loaded)
    binding = bind(loaded, pipeline)
    chosen = resolve_backend(backend or loaded.spec.target.backend, loaded, from_cli=backend is not None)
    t = loaded.spec.target
    devices = t.devices if t.devices != "all" else (0,)
    target = Target(
        backend=chosen,
        arch=resolve_arch(loaded, chosen, arch, devices[0] if devices else 0) if chosen == "cuda" else arch,
        compiler=t.compiler,
        fallback=t.fallback,
        fast_math=t.fast_math,
        tf32=t.tf32,
        options=tuple(t.options),
        device=devices[0] if devices else 0,
    )
    session = Session(loaded, pipeline, binding, target, warnings)
    # The host runs the float64 reference when it is the backend or when results are checked
    # (on every backend): refuse before anything is allocated if it cannot fit (E509).
    why = ("the reference backend" if chosen == "reference"
           else "check.reference: numpy" if loaded.spec.check.reference == "numpy" else None)
    if why is not None:
        raise_if_errors(check_reference_memory(loaded, pipeline, binding, why))
    session.inputs = make_inputs(binding, pipeline)
    return session


def make_executor(session: Session) -> Executor:
    backend = session.target.backend
    sizes = session.binding.sizes
    if backend == "reference":
        from cuvil_dsl.runtime.reference_executor import ReferenceExecutor

        return ReferenceExecutor(session.pipeline, sizes)
    from cuvil_dsl.passes import plan_pipeline
    from cuvil_dsl.spec import check_kernel_names

    plan, diags = plan_pipeline(session.pipeline, kernel_overrides(session.loaded), session.target.arch)
    diags = list(diags) + check_kernel_names(session.loaded, [k.name for k in plan.kernels])
    raise_if_errors(diags)
    if backend == "cpu":
        from cuvil_dsl.runtime.cpu_executor import CpuExecutor

        return CpuExecutor.build(session.pipeline, plan, sizes, session.target)
    from cuvil_dsl.runtime.cuda_executor import CudaExecutor

    return CudaExecutor.build(session.pipeline, plan, sizes, session.target)


def kernel_overrides(loaded: LoadedSpec) -> dict[str, dict]:
    """The spec's ``kernels`` section as plain dicts, keyed by kernel name."""
    return {name: k.model_dump(exclude_none=True) for name, k in loaded.spec.kernels.items()}


@dataclass
class BudgetItem:
    name: str
    limit: float
    value: float | None
    passed: bool | None

    def to_json(self) -> dict:
        return {"limit": self.limit, "value": self.value, "passed": self.passed}


@dataclass
class RunReport:
    pipeline: str
    backend: str
    spec_file: str
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    result_dtypes: dict[str, DType] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    check_passed: bool | None = None
    check_note: str = ""
    timing: Timing | None = None
    budget_items: list[BudgetItem] = field(default_factory=list)
    budget_passed: bool | None = None
    budget_note: str = ""
    kernels: list[KernelReport] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    failure: str | None = None
    snapshot: Snapshot | None = None
    wall_s: float = 0.0

    @property
    def exit_code(self) -> int:
        if any(d.is_error for d in self.diagnostics):
            return 2
        if self.failure or self.check_passed is False or self.budget_passed is False:
            return 1
        return 0

    def to_json(self) -> dict:
        timing = self.timing.to_json() if self.timing else {
            "p50_us": None, "p99_us": None, "mean_us": None, "std_us": None, "iterations": 0}
        return {
            "pipeline": self.pipeline,
            "backend": self.backend,
            "outputs": {
                name: {"shape": list(arr.shape), "dtype": self.result_dtypes[name].value}
                for name, arr in self.outputs.items()
            },
            "check": {"passed": self.check_passed, "results": {c.name: c.to_json() for c in self.comparisons}},
            "timing": _finite_or_none(timing),
            "budget": {"passed": self.budget_passed, **{b.name: b.to_json() for b in self.budget_items}},
            "kernels": [k.to_json() for k in self.kernels],
            "diagnostics": [d.to_json() for d in self.diagnostics],
            **({"failure": self.failure} if self.failure else {}),
        }


def _finite_or_none(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def check_results(session: Session, outputs: dict[str, np.ndarray]) -> tuple[list[Comparison], bool | None, str]:
    spec = session.spec
    if spec.check.reference == "none":
        return [], None, "not checked (check.reference: none)"
    if session.target.backend == "reference":
        return [], None, "not checked: the reference backend is the reference"
    expected = reference_execute(session.pipeline, session.inputs, session.binding.params)
    comparisons = []
    for res in session.pipeline.results:
        rtol, atol = spec.check.tolerances(res.type.dtype, session.target.tf32)
        comparisons.append(compare(res.name, outputs[res.name], expected[res.name], res.type.dtype, rtol, atol))
    return comparisons, all(c.passed for c in comparisons), ""


def judge_budget(session: Session, timing: Timing | None, kernels: list[KernelReport]) -> tuple[list[BudgetItem], bool | None, str]:
    budget = session.spec.budget
    judged = session.target.backend == budget.backend
    items: list[BudgetItem] = []

    def add(name: str, limit, value):
        if limit is None:
            return
        passed = None if (not judged or value is None) else value <= limit
        items.append(BudgetItem(name, float(limit), None if value is None else float(value), passed))

    add("p50_us", budget.p50_us, timing.p50_us if timing else None)
    add("p99_us", budget.p99_us, timing.p99_us if timing else None)
    spills = [k.spill_bytes for k in kernels if k.spill_bytes is not None]
    regs = [k.registers for k in kernels if k.registers is not None]
    add("max_spill_bytes", budget.max_spill_bytes, max(spills) if spills else None)
    add("max_registers", budget.max_registers, max(regs) if regs else None)
    if not items:
        return items, None, "no budget set"
    if not judged:
        return items, None, f"reported, not judged: the budget is for backend `{budget.backend}`"
    verdicts = [i.passed for i in items if i.passed is not None]
    return items, (all(verdicts) if verdicts else None), ""


def execute(session: Session, iterations: int | None = None, hooks: HostHooks | None = None,
            executor: Executor | None = None) -> RunReport:
    """One checked execution (host statements performed), then timing, then the budget."""
    from cuvil_dsl.diagnostics import RunFailure

    started = time.perf_counter()
    report = RunReport(session.pipeline.name, session.target.backend, session.loaded.file,
                       diagnostics=list(session.warnings))
    report.result_dtypes = {r.name: r.type.dtype for r in session.pipeline.results}
    own = executor is None
    executor = executor or make_executor(session)
    try:
        report.kernels = executor.kernel_reports()
        try:
            report.outputs = executor.run(session.inputs, session.binding.params, hooks or HostHooks())
        except RunFailure as exc:
            report.failure = str(exc)
            return report
        report.snapshot = executor.snapshot()
        report.comparisons, report.check_passed, report.check_note = check_results(session, report.outputs)
        run_cfg = session.spec.run
        report.timing = executor.time(run_cfg.warmup, iterations or run_cfg.iterations)
        report.kernels = executor.kernel_reports()
        report.budget_items, report.budget_passed, report.budget_note = judge_budget(
            session, report.timing, report.kernels)
    finally:
        if own:
            executor.close()
        report.wall_s = time.perf_counter() - started
    return report


def save_outputs(outputs: dict[str, np.ndarray], folder: str | Path) -> list[Path]:
    """One ``NAME.npy`` per result; bf16 is written as float32 (exact), since NumPy has no bf16."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, arr in outputs.items():
        data = np.asarray(arr)
        if data.dtype.kind == "V" or data.dtype.name == "bfloat16":
            data = data.astype(np.float32)
        target = out / f"{name}.npy"
        tmp = target.with_suffix(".npy.tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, data, allow_pickle=False)
        tmp.replace(target)
        written.append(target)
    return written
