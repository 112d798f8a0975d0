"""What the harness must catch, each with a message naming the case's file, result, buffer or kernel."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import yaml
from harness_support import SteadyClock, WrappedExecutor, add_noise, write_spec

from cuvil_dsl.cli import main
from cuvil_dsl.testing import identity
from cuvil_dsl.testing.case import sha256_file
from cuvil_dsl.testing.record import record_case
from cuvil_dsl.testing.replay import replay_case

KERNEL = "def main_k0(x, y):\n    for i in range(x.size):\n        y[i] = x[i] * 2.0\n"


def test_changed_generated_code_fails_with_a_diff_naming_the_kernel(tmp_path, spec_path, wrap_executor):
    class Generates(WrappedExecutor):
        text = KERNEL

        def sources(self):
            return {"main_k0.py": self.text}

    wrap_executor(Generates)
    out = tmp_path / "case"
    record_case(spec_path, out, backend="reference")
    assert (out / "sources" / "main_k0.py").read_text() == KERNEL
    assert replay_case(out).check("code").passed

    Generates.text = KERNEL.replace("* 2.0", "* 2.5")
    code = replay_case(out).check("code")
    assert code.passed is False and code.rule == "exact"
    assert "kernel `main_k0` (main_k0.py) changed" in code.message
    assert "-        y[i] = x[i] * 2.0" in code.message and "+        y[i] = x[i] * 2.5" in code.message
    assert "--- recorded/sources/main_k0.py" in code.message


def test_editing_a_recorded_source_is_caught_by_its_checksum(tmp_path, spec_path, wrap_executor, capsys):
    class Generates(WrappedExecutor):
        def sources(self):
            return {"main_k0.py": KERNEL}

    wrap_executor(Generates)
    out = tmp_path / "case"
    record_case(spec_path, out, backend="reference")
    (out / "sources" / "main_k0.py").write_text(KERNEL + "# edited\n")
    assert main(["replay", str(out)]) == 2
    assert "sources/main_k0.py: sha256" in capsys.readouterr().err


def test_tampered_input_or_result_file_is_named(case_dir, capsys):
    for relative in ("inputs/x.npy", "results/y.npy"):
        path = case_dir / relative
        original = path.read_bytes()
        path.write_bytes(original[:-2] + bytes([original[-2] ^ 1, original[-1]]))
        report = replay_case(case_dir)
        assert report.exit_code == 2
        checksums = report.check("checksums")
        assert checksums.passed is False and checksums.message.startswith(f"{relative}: sha256")
        assert [c.name for c in report.checks] == ["checksums"]  # nothing ran on tampered data
        assert main(["replay", str(case_dir)]) == 2
        assert relative in capsys.readouterr().err
        path.write_bytes(original)
    assert replay_case(case_dir).exit_code == 0


def test_inputs_that_no_longer_match_the_spec_are_named(case_dir):
    path = case_dir / "inputs" / "x.npy"
    data = np.load(path)
    data[3, 4] = 0
    np.save(path, data, allow_pickle=False)
    manifest_path = case_dir / "case.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    manifest["files"]["inputs/x.npy"] = sha256_file(path)  # a consistent, but different, recording
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    inputs = replay_case(case_dir).check("inputs")
    assert inputs.passed is False
    assert "input `x` regenerated from the spec differs from the recording: 1 of 512 elements" in inputs.message
    assert "index [3, 4]" in inputs.message


def test_slowed_pipeline_is_a_regression_named_with_its_ratio(tmp_path, wrap_executor, capsys):
    spec = write_spec(tmp_path / "src", budget="{backend: reference, regress_pct: 10}")
    wrap_executor(SteadyClock)
    out = tmp_path / "case"
    record_case(spec, out, backend="reference")
    steady = replay_case(out)
    assert steady.check("time").passed is True
    assert "1.00x" in steady.check("time").message

    class ThreeTimesSlower(SteadyClock):
        factor = 3.0

    wrap_executor(ThreeTimesSlower)
    report = replay_case(out)
    time_check = report.check("time")
    assert report.exit_code == 1 and time_check.passed is False and time_check.rule == "noise"
    assert time_check.message.startswith("regression: median 300.0 us vs recorded 100.0 us: 3.00x (+200%)")
    assert "beyond regress_pct 10%" in time_check.message
    assert main(["replay", str(out)]) == 1
    assert "FAIL  time" in capsys.readouterr().out


def test_slowdown_within_regress_pct_plus_noise_passes(tmp_path, wrap_executor):
    spec = write_spec(tmp_path / "src", budget="{backend: reference, regress_pct: 10}")
    wrap_executor(SteadyClock)
    out = tmp_path / "case"
    record_case(spec, out, backend="reference")

    class SlightlySlower(SteadyClock):
        factor = 1.08

    wrap_executor(SlightlySlower)
    assert replay_case(out).check("time").passed is True


def test_budget_is_judged_on_its_backend(tmp_path, wrap_executor):
    spec = write_spec(tmp_path / "src", budget="{backend: reference, p50_us: 150}")
    wrap_executor(SteadyClock)
    out = tmp_path / "case"
    record_case(spec, out, backend="reference")
    assert replay_case(out).check("budget").passed is True

    class Slower(SteadyClock):
        factor = 2.0

    wrap_executor(Slower)
    budget = replay_case(out).check("budget")
    assert budget.passed is False and "p50_us 200 (limit 150) OVER" in budget.message


def test_damaged_guard_band_names_the_buffer(case_dir, wrap_executor):
    class Overruns(WrappedExecutor):
        def snapshot(self):
            snapshot = self.inner.snapshot()
            buffers = tuple(dataclasses.replace(b, guard_ok=b.name != "y") for b in snapshot.buffers)
            return dataclasses.replace(snapshot, buffers=buffers)

    wrap_executor(Overruns)
    report = replay_case(case_dir)
    guards = report.check("guards")
    assert report.exit_code == 1 and guards.passed is False
    assert "guard bands damaged around buffer `y` after the checked execution" in guards.message
    assert report.check("snapshot").passed  # the layout and the digests are still as recorded


def test_nondeterministic_kernel_names_the_result(case_dir, wrap_executor):
    class Racy(WrappedExecutor):
        def run(self, inputs, params, hooks=None):
            outputs = super().run(inputs, params, hooks)
            return add_noise(outputs) if self.runs == 2 else outputs

    wrap_executor(Racy)
    report = replay_case(case_dir)
    determinism = report.check("determinism")
    assert report.check("results").passed  # the first execution still equals the recording
    assert determinism.passed is False
    assert re.match(r"result `y` differs between two executions of the same inputs: 512 of 512 elements",
                    determinism.message)


def test_changed_results_fail_the_exact_rule_naming_the_result(case_dir, wrap_executor):
    class OffByOneUlp(WrappedExecutor):
        def run(self, inputs, params, hooks=None):
            return add_noise(super().run(inputs, params, hooks))

    wrap_executor(OffByOneUlp)
    results = replay_case(case_dir).check("results")
    assert results.passed is False and results.rule == "exact"
    assert "result `y` differs from the recording: 512 of 512 elements differ" in results.message


def test_a_processor_with_other_vector_extensions_gets_the_tolerance_rule(case_dir, monkeypatch):
    """Two processors a virtual machine names alike ("AMD EPYC") may differ in what NumPy dispatches to (AVX2 or
    AVX-512), and NumPy's float64 exp and tanh with them by an ulp: the identity records the extensions."""
    recorded = identity.machine("reference")
    assert recorded["simd"] not in ("", "unknown")
    monkeypatch.setattr(identity, "_simd", lambda: "(a processor without them)")
    report = replay_case(case_dir)
    assert report.rule == "tolerance" and "machine.simd:" in report.rule_reason
    assert report.check("results").passed is True


def test_another_machine_gets_the_tolerance_rule_and_says_why(case_dir, wrap_executor, monkeypatch):
    real_machine = identity.machine
    monkeypatch.setattr(identity, "machine", lambda backend, device=0: {**real_machine(backend, device),
                                                                         "cpu": "Another CPU"})

    class OffByOneUlp(WrappedExecutor):
        def run(self, inputs, params, hooks=None):
            return add_noise(super().run(inputs, params, hooks))

    wrap_executor(OffByOneUlp)
    report = replay_case(case_dir)
    assert report.rule == "tolerance" and "machine.cpu:" in report.rule_reason and "Another CPU" in report.rule_reason
    results = report.check("results")
    assert results.passed is True and results.rule == "tolerance"  # one ulp is well within f16's 1e-3
    assert "machine.cpu" in results.message
    assert "digests not compared" in report.check("snapshot").message
    assert report.check("time").passed is None and "another machine" in report.check("time").message

    class FarOff(WrappedExecutor):
        def run(self, inputs, params, hooks=None):
            return {name: (a * 1.5).astype(a.dtype) for name, a in super().run(inputs, params, hooks).items()}

    wrap_executor(FarOff)
    results = replay_case(case_dir).check("results")
    assert results.passed is False and results.message.splitlines()[1].startswith("result y:")
