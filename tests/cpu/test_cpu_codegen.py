"""Generated numba source: valid Python, the expected shape, and user names only in comments."""

from __future__ import annotations

import ast
import re

from cpu_support import assert_matches_reference, build, random_inputs

from cuvil_dsl.codegen.cpu import render_cpu
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes.fusion import plan_pipeline

HOSTILE = """
pipeline import(os: f32[N], __class__: f32[N], sys: f32[N, N], b0: f32[N], lambda: f32 = 2.0) -> (def: f32[N], self: f32[N]) {
    graph __init__ {
        kernel __dict__ {
            def = exp(os) * lambda + __class__ - b0
        }
    }
    np = sum(def * sys, axis=1) + def
    self = softmax(np) * b0
}
"""
USER_NAMES = ("import", "os", "__class__", "sys", "lambda", "def", "self", "np", "__dict__", "__init__")
GENERATED = re.compile(r"^((b|u|t|c|w|r|row|part)\d+|c\d+_|q|i|e|lhs|rhs|np|numba|cvl|math|range|abs|max|min"
                       r"|cvl_[A-Za-z0-9_]+)$")


def _identifiers(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name)
    return names


def test_user_identifiers_reach_the_source_only_as_sanitised_comments():
    sizes = {"N": 6}
    pipeline, ex = build(HOSTILE, sizes)
    assert_matches_reference(pipeline, ex, random_inputs(pipeline, sizes, seed=14))
    sources = ex.sources()
    assert "cvl_dict.py" in sources
    for name, text in sources.items():
        identifiers = _identifiers(text)
        assert all(GENERATED.match(n) for n in identifiers), sorted(n for n in identifiers if not GENERATED.match(n))
        strings = [n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for user in USER_NAMES:
            if user != "np":  # NumPy's own module alias is generated, the user's `np` is a comment
                assert user not in identifiers, (name, user)
            assert not any(user in s for s in strings), (name, user)
    assert "    b0,  # os: f32[N] input" in sources["cvl_dict.py"]


def test_an_elementwise_chain_renders_as_one_flat_prange_loop():
    checked = check_source("pipeline f(x: f32[N]) -> y: f32[N] { y = relu(x * 1.5 + 0.25) * 2 - 0.5 }")
    plan, _ = plan_pipeline(checked.module.pipelines[0])
    (module,) = render_cpu(plan, {"N": 1000})
    body = module.source.split("def cvl_main_k1(", 1)[1]
    assert "for i in numba.prange(1000):" in body
    assert "cvl.relu_f32(" in body and body.rstrip().endswith("b1[i] = t10")
    assert [p.kind for p in module.params] == ["buffer", "buffer", "scalar", "scalar", "scalar", "scalar"]
    assert '"void(float32[::1], float32[::1], float32, float32, float32, float32)"' in module.source
    compile(module.source, module.file_name, "exec")


def test_a_rounded_16_bit_value_is_stored_from_its_unrounded_form():
    """A named f16 value rounded where it is bound and then stored rounds once, at the store (rounding to the
    nearest half is idempotent: the same bits for one conversion instead of three); a value used again after
    its rounding keeps it for those uses, and the results still match the reference bit for bit."""
    import numpy as np

    from cuvil_dsl.codegen.base import rounded_argument

    source = ("pipeline f(x: f16[R, C], keep: bool[R, C]) -> (y: f16[R, C], z: f16[R, C]) {\n"
              "    y = where(keep, x * 2.0, 0)\n    z = softmax(x * 0.5, axis=-1)\n}\n")
    sizes = {"R": 4, "C": 40}
    pipeline, ex = build(source, sizes)
    inputs = random_inputs(pipeline, sizes, seed=5)
    got = assert_matches_reference(pipeline, ex, inputs)
    for text in ex.sources().values():
        stores = [line.strip() for line in text.splitlines() if re.match(r"\s*b\d+\[.*\] = cvl\.f32_to_f16\(", line)]
        assert stores
        for line in stores:  # never the name of a rounded value: its unrounded expression
            name = re.fullmatch(r".* = cvl\.f32_to_f16\((t\d+)\)", line)
            assert name is None or f"{name.group(1)} = cvl.round_f16(" not in text, line
    x = inputs["x"].astype(np.float32)
    want = np.where(inputs["keep"], (x * np.float32(2.0)).astype(np.float16), np.float16(0))
    assert np.array_equal(got["y"].view(np.uint16), want.view(np.uint16))
    assert rounded_argument(["t6 = cvl.round_f16((t5 if b1[i] else u1))"], "t6 = cvl.round_f16(", ")") == "(t5 if b1[i] else u1)"
    assert rounded_argument(["t6 = cvl.round_f16(a) + cvl.round_f16(b)"], "t6 = cvl.round_f16(", ")") is None
