"""regression/update_code.py: re-recording the cases an intended codegen change altered, and nothing else."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from harness_support import SPECS

from cuvil_dsl.passes import fusion
from cuvil_dsl.testing.record import record_case

ROOT = Path(__file__).resolve().parents[2]


def _update_code():
    spec = importlib.util.spec_from_file_location("update_code", ROOT / "regression" / "update_code.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def unfused_case(tmp_path, monkeypatch) -> Path:
    """The attention example recorded on the CPU backend as the planner placed it before session 28: its mask
    `causal = kpos <= qpos` in a kernel of its own, stored (the sink step refused kernel blocks). Today's code
    computes the mask inside the block, so a replay sees other code and another arena, with the same results."""
    monkeypatch.setattr(fusion._Planner, "_sink_target", lambda self, op, a, groups: None)
    folder = tmp_path / "cases" / "attention"
    record_case(SPECS / "attention.yaml", folder, backend="cpu", shapes={"M": 16, "N": 32}, iterations=1)
    monkeypatch.undo()
    return folder


def test_a_changed_arena_is_re_recorded_only_with_layout(unfused_case, capsys):
    update = _update_code()
    before = _files(unfused_case)
    assert "sources/cvl_forward_k1.py" in before  # the mask's own kernel
    assert update.main(["--backend", "cpu", "--cases", str(unfused_case.parent)]) == 1
    assert "FAILED attention: code, snapshot" in capsys.readouterr().out
    assert _files(unfused_case) == before  # left alone
    assert update.main(["--backend", "cpu", "--layout", "--cases", str(unfused_case.parent)]) == 0
    assert "re-recorded (code and layout): attention" in capsys.readouterr().out
    after = _files(unfused_case)
    assert "sources/cvl_forward_k1.py" not in after
    assert after["results/o.npy"] == before["results/o.npy"]


def test_a_re_recording_that_changes_a_result_is_put_back(unfused_case, capsys, monkeypatch):
    update = _update_code()
    before = _files(unfused_case)
    monkeypatch.setattr(update, "same_inputs_and_results", lambda *a: "the re-recording changed an input or result")
    assert update.main(["--backend", "cpu", "--layout", "--cases", str(unfused_case.parent)]) == 1
    assert "FAILED attention: the re-recording changed an input or result" in capsys.readouterr().out
    assert _files(unfused_case) == before


def test_the_comparison_sees_a_result_that_changed(unfused_case, tmp_path):
    update = _update_code()
    assert update.same_inputs_and_results(unfused_case, unfused_case, True) is None
    changed = tmp_path / "changed"
    shutil.copytree(unfused_case, changed)
    snapshot = json.loads((changed / "snapshot.json").read_text())
    for buffer in snapshot["buffers"]:
        if buffer["name"] == "o":
            buffer["digest"] = "0" * 64
    (changed / "snapshot.json").write_text(json.dumps(snapshot))
    why = update.same_inputs_and_results(unfused_case, changed, True)
    assert why and "`o` holds different bytes" in why
    assert update.same_inputs_and_results(unfused_case, changed, False) is None  # the tolerance rule: layout only
