"""Runtime pieces that need no GPU: argument cells, uniforms, binding, sanitizer command, graph cache."""

from __future__ import annotations

import ctypes
import os
import stat
import sys

import numpy as np
import pytest

from cuvil_dsl.codegen.artifact import KernelArg
from cuvil_dsl.diagnostics import InternalError, Span, UserError
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes.plan import FusionPlan
from cuvil_dsl.runtime import sanitize
from cuvil_dsl.runtime.binding import evaluate_uniforms, infer_sizes, resolve_params
from cuvil_dsl.runtime.graphs import GraphCache, GraphRunner, GraphStats
from cuvil_dsl.runtime.modules import ArgumentCells, scalar_ctype
from cuvil_dsl.types import DType


def pipeline_of(source: str):
    checked = check_source(source)
    assert checked.ok, checked.diagnostics
    return checked.module.pipelines[0]


def test_scalar_ctypes_follow_the_rendered_c_type():
    assert scalar_ctype(KernelArg("scalar", "a", DType.F16, "float")) is ctypes.c_float
    assert scalar_ctype(KernelArg("scalar", "a", DType.F64, "const double")) is ctypes.c_double
    assert scalar_ctype(KernelArg("scalar", "a", DType.I32, "int")) is ctypes.c_int32
    assert scalar_ctype(KernelArg("scalar", "a", DType.BOOL, "bool")) is ctypes.c_bool
    with pytest.raises(InternalError, match="cannot pass"):
        scalar_ctype(KernelArg("scalar", "a", DType.F32, "float4"))


def test_cells_are_shared_and_count_changes():
    cells = ArgumentCells()
    assert cells.pointer("x") is cells.pointer("x")
    cells.set_pointer("x", 4096)
    version = cells.version
    cells.set_pointer("x", 4096)  # unchanged: no new version, graphs stay current
    assert cells.version == version
    cells.set_pointer("x", 8192)
    assert cells.version == version + 1 and cells.pointer("x").value == 8192
    alpha = cells.scalar("alpha", ctypes.c_float)
    cells.set_uniforms({"alpha": np.float32(0.1)})
    version = cells.version
    cells.set_uniforms({"alpha": 0.1})  # the same float once stored as float32
    cells.set_uniforms({"alpha": np.asarray(0.1, np.float32)})
    assert cells.version == version and alpha.value == pytest.approx(0.1)
    cells.scalar("nan", ctypes.c_float)
    cells.set_uniforms({"alpha": 0.1, "nan": float("nan")})
    version = cells.version
    cells.set_uniforms({"alpha": 0.1, "nan": float("nan")})
    assert cells.version == version  # NaN compared by bits, not as "never equal"
    with pytest.raises(InternalError):
        cells.set_uniforms({})


def test_uniforms_are_the_reference_values_of_the_host_ops():
    pipeline = pipeline_of("pipeline f(x: f16[N], a: f32 = 0.5) -> y: f16[N] {\n    y = x * (a * 3.0)\n}\n")
    scalar_ops = tuple(op for op in pipeline.ops() if op.is_scalar or op.op == "to_tensor")
    plan = FusionPlan(pipeline, scalar_ops, (), ())
    env = evaluate_uniforms(plan, resolve_params(pipeline, {}))
    assert env["a"] == 0.5
    assert any(isinstance(v, float) and v == pytest.approx(1.5) for k, v in env.items() if k != "a")


def test_resolve_params_defaults_and_errors():
    pipeline = pipeline_of("pipeline f(x: f32[N], a: f32, n: i32 = 2, b: bool = false) -> y: f32[N] {\n"
                           "    y = where(b, x * a, x * n)\n}\n")
    assert resolve_params(pipeline, {"a": 1}) == {"a": 1.0, "n": 2, "b": False}
    with pytest.raises(UserError) as info:
        resolve_params(pipeline, {"n": 2**31})
    assert sorted(d.code for d in info.value.diagnostics) == ["E507", "E508"]


def test_infer_sizes_binds_checks_and_reports():
    pipeline = pipeline_of("pipeline f(x: f32[M, K], w: f32[K, 4]) -> y: f32[M, 4] {\n    y = x @ w\n}\n")
    f32 = np.dtype(np.float32)
    assert infer_sizes(pipeline, {}, {"x": (3, 5), "w": (5, 4)}, {"x": f32, "w": f32}) == {"M": 3, "K": 5}
    with pytest.raises(UserError) as info:
        infer_sizes(pipeline, {}, {"x": (3, 5), "w": (6, 4)}, {"x": f32, "w": f32})
    assert [d.code for d in info.value.diagnostics] == ["E506"]
    with pytest.raises(UserError) as info:
        infer_sizes(pipeline, {}, {"x": (3, 5), "w": (5, 3)}, {"x": f32, "w": f32})
    assert "axis 1 must be 4" in str(info.value)
    with pytest.raises(UserError):
        infer_sizes(pipeline, {"M": 2}, {"x": (3, 5), "w": (5, 4)}, {"x": f32, "w": f32})


def test_strip_sanitize_removes_every_spelling():
    argv = ["run", "spec.yaml", "--sanitize", "memcheck", "--json"]
    assert sanitize.strip_sanitize(argv) == ["run", "spec.yaml", "--json"]
    assert sanitize.strip_sanitize(["run", "--sanitize=racecheck", "s.yaml"]) == ["run", "s.yaml"]
    assert sanitize.strip_sanitize(["run", "s.yaml", "--sanitize"]) == ["run", "s.yaml"]


def test_sanitizer_command_line():
    command = sanitize.sanitizer_command("/bin/cs", "memcheck", "/tmp/r.txt", ["run", "--sanitize", "memcheck", "s"])
    assert command[:11] == ["/bin/cs", "--tool", "memcheck", "--error-exitcode", "9", "--padding", "4096",
                            "--print-limit", "50", "--log-file", "/tmp/r.txt"]
    assert command[11:] == [sys.executable, "-m", "cuvil_dsl", "run", "s"]


def test_missing_sanitizer_or_bad_tool_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    with pytest.raises(UserError) as info:
        sanitize.rerun_under_sanitizer(["run", "s.yaml"], "memcheck")
    assert info.value.diagnostics[0].code == "E601" and "compute-sanitizer" in str(info.value)
    with pytest.raises(UserError) as info:
        sanitize.rerun_under_sanitizer(["run", "s.yaml"], "leakcheck")
    assert info.value.diagnostics[0].code == "E508"


def test_rerun_passes_lineinfo_and_returns_the_report(tmp_path, monkeypatch):
    fake = tmp_path / "compute-sanitizer"
    # A stand-in that records its environment in the log file and exits as the real one does on errors.
    fake.write_text("#!/bin/sh\nwhile [ \"$1\" != \"--log-file\" ]; do shift; done\n"
                    "echo \"lineinfo=$CUVIL_LINEINFO\" > \"$2\"\nexit 9\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert sanitize.find_sanitizer() == str(fake)
    rc, report = sanitize.rerun_under_sanitizer(["run", "s.yaml", "--sanitize", "memcheck"], "memcheck")
    assert rc == 9 and report.strip() == "lineinfo=1"


def test_graph_cache_keys_and_eviction():
    cache = GraphCache()
    span = Span.whole_file("p.cuvil")
    key = GraphCache.key("p", {"N": 4, "M": 2}, "forward")
    assert key == ("p", (("M", 2), ("N", 4)), "forward")
    runner = GraphRunner("forward", span, (), ArgumentCells(), None, cache.stats)
    cache.add(key, runner)
    cache.add(GraphCache.key("p", {"N": 8, "M": 2}, "forward"), GraphRunner("forward", span, (), ArgumentCells(),
                                                                               None, cache.stats))
    assert cache.get(key) is runner and len(cache.keys()) == 2
    cache.evict("p", {"M": 2, "N": 4})
    assert cache.get(key) is None and len(cache.keys()) == 1
    assert cache.stats == GraphStats()
