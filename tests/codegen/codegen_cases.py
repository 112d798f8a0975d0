"""The programs the codegen tests render, compile and (on a GPU) run.

Every spec of ``specs/`` and every program of ``tests/codegen/programs/`` (a ``.cuvil`` with
a spec-format ``.yaml``), loaded and bound exactly as ``cuvil-dsl run`` does: sizes from
``shapes`` and ``.npy`` headers, scalar values, generated inputs, kernel overrides, tf32 and
tolerances. A tensor parameter named ``special`` gets NaN, infinities and out-of-range values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.frontend import check_file
from cuvil_dsl.ir.nodes import Pipeline
from cuvil_dsl.passes import FusionPlan, plan_pipeline
from cuvil_dsl.spec.binding import Binding, bind, select_pipeline
from cuvil_dsl.spec.inputs import make_inputs
from cuvil_dsl.spec.loader import LoadedSpec, load_spec

ROOT = Path(__file__).resolve().parents[2]
CASE_DIRS = (ROOT / "specs", ROOT / "tests" / "codegen" / "programs")
ARCHS = ("sm_80", "sm_90")  # every case renders and compiles for these (test_codegen_compile.py)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 70000.0, -0.0, 2.5, -2.5, 1e-8])


@dataclass(frozen=True)
class Case:
    path: Path
    loaded: LoadedSpec
    pipeline: Pipeline
    binding: Binding

    @property
    def tf32(self) -> bool:
        return self.loaded.spec.target.tf32

    def plan(self, arch: str) -> FusionPlan:
        plan, diags = plan_pipeline(self.pipeline, dict(self.loaded.spec.kernels), arch)
        assert not [d for d in diags if d.is_error], diags
        # the CLI rejects a spec naming a kernel the plan lacks (E501); a test must not tune one silently either
        unknown = set(self.loaded.spec.kernels) - {k.name for k in plan.kernels}
        assert not unknown, f"{self.path.name} tunes kernels the plan does not have: {sorted(unknown)}"
        return plan

    def inputs(self) -> dict[str, np.ndarray]:
        arrays = make_inputs(self.binding, self.pipeline)
        if "special" in arrays:
            flat = arrays["special"].reshape(-1)
            flat[: len(SPECIAL)] = SPECIAL[: flat.size].astype(flat.dtype)
        return arrays


def case_paths() -> list[Path]:
    return [path for folder in CASE_DIRS for path in sorted(folder.glob("*.yaml"))]


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def load_case(path: Path) -> Case:
    loaded = load_spec(path)
    checked = check_file(loaded.pipeline_path)
    assert checked.ok, [str(d) for d in checked.diagnostics]
    pipeline = select_pipeline(loaded, checked.module)
    return Case(path, loaded, pipeline, bind(loaded, pipeline))


def compile_kernel(k, monkeypatch, tmp_path, arch: str = "sm_90", **options):
    """Rendered kernel ``k`` compiled by NVRTC into a fresh cache under ``tmp_path``: its CompiledUnit
    (the test is skipped where NVRTC is unavailable)."""
    from cuvil_dsl.compile import CompileUnit, compile_units, nvrtc

    try:
        nvrtc.library()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], arch, **options)
    return unit
