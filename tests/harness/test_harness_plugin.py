"""The pytest plugin, run in a scratch project with pytester: collection, ids, verdicts, reports."""

from __future__ import annotations

import json

import pytest
import yaml
from harness_support import write_spec

from cuvil_dsl.runtime.device import gpu_available
from cuvil_dsl.testing.case import CHECKS
from cuvil_dsl.testing.record import record_case

pytest_plugins = ["pytester"]


@pytest.fixture
def project(pytester):
    """A scratch rootdir holding one recorded case at regression/reference/small.

    Benchmarks are off unless a test turns them on; hypothesis' plugin is left out (it only
    costs a second of import per run here)."""
    pytester.makeini("[pytest]\naddopts = -p no:hypothesispytest -p no:cacheprovider --benchmark-disable\n")
    spec = write_spec(pytester.path / "src")
    record_case(spec, pytester.path / "regression" / "reference" / "small", backend="reference")
    return pytester


def test_collects_one_item_per_check_with_readable_ids(project):
    (project.path / "elsewhere").mkdir()
    (project.path / "elsewhere" / "case.yaml").write_text("not: a case\n")  # outside regression/: ignored
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines([f"regression/reference/small::{name}" for name in CHECKS])
    assert "elsewhere" not in result.stdout.str()


def test_a_good_case_passes(project):
    result = project.runpytest("-v")
    result.assert_outcomes(passed=len(CHECKS))
    result.stdout.fnmatch_lines(["regression/reference/small::results PASSED*"])


def test_a_tampered_case_fails_its_checksums_item_and_skips_the_rest(project):
    result_file = project.path / "regression" / "reference" / "small" / "results" / "y.npy"
    result_file.write_bytes(result_file.read_bytes()[:-1] + b"\x00")
    result = project.runpytest("-rfs")
    result.assert_outcomes(failed=1, skipped=len(CHECKS) - 1)
    result.stdout.fnmatch_lines(["*regression/reference/small::checksums*", "*results/y.npy: sha256*"])
    assert "Traceback" not in result.stdout.str()


def test_report_option_writes_html_and_json(project):
    result = project.runpytest("--cuvil-report", "report.html")
    result.assert_outcomes(passed=len(CHECKS))
    page = (project.path / "report.html").read_text()
    assert "regression/reference/small" in page and "data:image/png;base64," in page
    data = json.loads((project.path / "report.json").read_text())
    assert data["passed"] is True and data["cases"][0]["case"] == "regression/reference/small"


def test_time_runs_as_a_benchmark_with_device_times_in_extra_info(project, monkeypatch):
    # The inner run is in this process: under pytest-xdist it would inherit the worker's variable, by which
    # pytest-benchmark switches itself off (as it should for the outer run's workers, not for this one).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    result = project.runpytest("-k", "time", "--benchmark-enable", "--benchmark-json", "bench.json")
    result.assert_outcomes(passed=1)
    bench = json.loads((project.path / "bench.json").read_text())["benchmarks"][0]
    assert bench["fullname"] == "regression/reference/small::time"
    extra = bench["extra_info"]
    assert extra["backend"] == "reference" and len(extra["device_samples_us"]) == 5
    assert extra["recorded_median_us"] > 0


def test_update_option_re_records_then_replays(project):
    manifest = project.path / "regression" / "reference" / "small" / "case.yaml"
    created = yaml.safe_load(manifest.read_text())["created"]
    result = project.runpytest("--cuvil-update")
    result.assert_outcomes(passed=len(CHECKS))
    assert yaml.safe_load(manifest.read_text())["files"]  # rewritten, still complete
    assert yaml.safe_load(manifest.read_text())["created"] >= created


@pytest.mark.skipif(gpu_available(), reason="checks the skip that only happens without a GPU")
def test_cuda_cases_skip_without_a_gpu(project):
    manifest = project.path / "regression" / "reference" / "small" / "case.yaml"
    data = yaml.safe_load(manifest.read_text())
    data["backend"] = "cuda"
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    result = project.runpytest("-rs")
    result.assert_outcomes(skipped=len(CHECKS))
    result.stdout.fnmatch_lines(["*replays on cuda, and this machine has no CUDA GPU*"])
