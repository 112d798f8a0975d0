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
