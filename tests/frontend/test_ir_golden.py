"""Golden IR printouts of the examples: a change in lowering shows up as a diff.

Regenerate with ``CUVIL_UPDATE_GOLDENS=1 pytest tests/frontend/test_ir_golden.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuvil_dsl.frontend import check_file
from cuvil_dsl.ir.printer import format_module

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = sorted((ROOT / "specs").glob("*.cuvil"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_ir_matches_golden(path):
    checked = check_file(path)
    assert checked.ok, checked.diagnostics
    text = format_module(checked.module)
    golden = GOLDEN / f"{path.stem}.ir"
    if os.environ.get("CUVIL_UPDATE_GOLDENS") == "1" or not golden.exists():
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
        if os.environ.get("CUVIL_UPDATE_GOLDENS") != "1":
            pytest.fail(f"wrote missing golden {golden.name}; check it in")
    assert text == golden.read_text()


def test_examples_have_no_warnings():
    for path in EXAMPLES:
        assert not check_file(path).diagnostics, path
