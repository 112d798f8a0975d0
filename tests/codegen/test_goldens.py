"""Generated CUDA C compared with checked-in goldens, so a refactor shows its diff.

Update after an intended change with ``CUVIL_UPDATE_GOLDENS=1 pytest tests/codegen/test_goldens.py``
and review the diff of ``tests/codegen/golden/``.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from codegen_cases import ROOT, load_case

from cuvil_dsl.codegen import render_cuda

GOLDEN = Path(__file__).parent / "golden"
PROGRAMS = ROOT / "tests" / "codegen" / "programs"
# (golden file, program, kernel): a broadcasting elementwise chain with named f16 rounding, a
# row softmax, a GEMM with its epilogue, fused masked attention scores, layernorm and rmsnorm,
# and a column (strided) reduction
CASES = [
    ("elementwise_f16.cu", "f16_named_rounding", "main_k1"),
    ("softmax_rows.cu", "softmax_short_f16", "main_k1"),
    ("gemm_gelu_epilogue.cu", "gemm_bf16", "main_k1"),
    ("masked_attention.cu", "attention_f16", "masked"),
    ("norms.cu", "norms", "main_k1"),
    ("column_sum.cu", "reductions_axes", "main_k1"),
]


@pytest.mark.parametrize("golden,program,kernel", CASES, ids=[c[0] for c in CASES])
def test_generated_source_matches_golden(golden, program, kernel):
    case = load_case(PROGRAMS / f"{program}.yaml")
    (k,) = [k for k in render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90") if k.name == kernel]
    path = GOLDEN / golden
    if os.environ.get("CUVIL_UPDATE_GOLDENS") == "1":
        path.write_text(k.source)
    assert path.exists(), f"no golden {path.name}; run with CUVIL_UPDATE_GOLDENS=1 to create it"
    want = path.read_text()
    if k.source != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), k.source.splitlines(True), str(path), "rendered"))
        pytest.fail(f"generated source differs from {path.name} (CUVIL_UPDATE_GOLDENS=1 updates it):\n{diff[:6000]}")
